#include "backends/cpu_blas/blas_startup.h"

#include <cblas.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvserve::backends::cpu_blas {
namespace {

constexpr char kCoreTypeVariable[] = "OPENBLAS_CORETYPE";

std::optional<std::string> NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || value[0] == '\0') return std::nullopt;
  return std::string(value);
}

void Log(std::string_view program, const BlasCoreDecision& decision) {
  std::fprintf(stderr, "%.*s: %s%s\n", static_cast<int>(program.size()), program.data(),
               decision.degraded ? "warning: " : "", decision.reason.c_str());
  std::fflush(stderr);
}

}  // namespace

std::string OpenBlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "unknown" : name;
}

std::string OpenBlasConfig() {
  const char* config = openblas_get_config();
  return config == nullptr ? "unknown" : config;
}

BlasCoreEnv ReadBlasCoreEnv() {
  return {.coretype = NonEmptyEnv(kCoreTypeVariable), .marker = NonEmptyEnv(kBlasReexecMarker)};
}

absl::Status ReexecWithBlasCore(const BlasCoreDecision& decision, std::string_view chosen_core,
                                char** argv) {
  const std::string marker = BlasReexecMarkerValue(chosen_core, decision.target_core);
  if (setenv(kCoreTypeVariable, decision.target_core.c_str(), 1) != 0 ||
      setenv(kBlasReexecMarker, marker.c_str(), 1) != 0) {
    const int error = errno;
    unsetenv(kCoreTypeVariable);
    unsetenv(kBlasReexecMarker);
    return absl::InternalError(absl::StrCat("setenv: ", std::strerror(error)));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  execv("/proc/self/exe", argv);
  const int error = errno;
  unsetenv(kCoreTypeVariable);
  unsetenv(kBlasReexecMarker);
  return absl::InternalError(absl::StrCat("execv /proc/self/exe: ", std::strerror(error)));
}

BlasCoreDecision EnsureBestBlasCoreFrom(std::string_view program, std::string_view chosen_core,
                                        bool reexec_enabled, char** argv) {
  BlasCoreDecision decision =
      DecideBlasCore(DetectCpuFeatures(), chosen_core, ReadBlasCoreEnv(), reexec_enabled);
  if (decision.reexec) {
    const absl::Status failed = ReexecWithBlasCore(decision, chosen_core, argv);
    decision.reexec = false;
    decision.degraded = true;
    decision.reason =
        absl::StrCat("BLAS core ", std::string(chosen_core), ": chosen by OpenBLAS; could not ",
                     "re-execute with OPENBLAS_CORETYPE=", decision.target_core, " (",
                     failed.message(), "): degraded");
    decision.target_core = std::string(chosen_core);
  }
  Log(program, decision);
  return decision;
}

BlasCoreDecision EnsureBestBlasCore(std::string_view program, bool reexec_enabled, char** argv) {
  return EnsureBestBlasCoreFrom(program, OpenBlasCoreName(), reexec_enabled, argv);
}

}  // namespace kvserve::backends::cpu_blas
