// blas_reexec_probe: test binary for EnsureBestBlasCore's re-exec (blas_reexec_test.py).
// --pretend-chosen-core=NAME makes the first process believe OpenBLAS chose NAME at load
// (the CPU running the test may be one OpenBLAS recognises, so no real fallback happens);
// a re-executed process (marker set) sees the real core. Prints one line on stdout:
//   core=<openblas_get_corename()> best=<BestBlasCore> degraded=<0|1>
//   coretype=<OPENBLAS_CORETYPE or -> args=<positional arguments, space-separated>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "backends/cpu_blas/blas_core.h"
#include "backends/cpu_blas/blas_startup.h"
#include "common/flags.h"

ABSL_FLAG(bool, blas_reexec, true, kvserve::backends::cpu_blas::kBlasReexecFlagHelp);
ABSL_FLAG(std::string, pretend_chosen_core, "",
          "The core OpenBLAS is taken to have chosen before any re-exec; empty = the real one.");

int main(int argc, char** argv) {
  namespace cpu_blas = kvserve::backends::cpu_blas;
  const std::vector<std::string> args = kvserve::common::ParseFlags(
      argc, argv, "Usage: blas_reexec_probe [--pretend-chosen-core=NAME] [ARGS...]",
      "blas_reexec_probe_main.cc");
  const std::string pretend = absl::GetFlag(FLAGS_pretend_chosen_core);
  const bool reexecuted = std::getenv(cpu_blas::kBlasReexecMarker) != nullptr;
  const std::string chosen = pretend.empty() || reexecuted ? cpu_blas::OpenBlasCoreName() : pretend;
  const cpu_blas::BlasCoreDecision decision = cpu_blas::EnsureBestBlasCoreFrom(
      "blas_reexec_probe", chosen, absl::GetFlag(FLAGS_blas_reexec), argv);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("core=%s best=%s degraded=%d coretype=%s args=%s\n",
              cpu_blas::OpenBlasCoreName().c_str(),
              std::string(cpu_blas::BestBlasCore(cpu_blas::DetectCpuFeatures())).c_str(),
              decision.degraded ? 1 : 0, coretype == nullptr ? "-" : coretype,
              absl::StrJoin(args.begin() + 1, args.end(), " ").c_str());
  return 0;
}
