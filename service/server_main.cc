// kvserve: the gRPC inference server. Its flags (server_flags.cc, server/tls_flags.cc,
// server/auth_flags.cc) map onto ProcessOptions; RunProcess (server_run.h) starts the
// server (liveness at once, readiness once the model is loaded) and drains on SIGTERM or
// SIGINT: new work gets UNAVAILABLE, in-flight requests get up to --drain-grace, then the
// process exits 0. A second signal during the drain ends the grace period at once (what
// is still running is cancelled).

#include <cstdio>
#include <string>

#include "backends/cpu_blas/blas_startup.h"
#include "backends/runtime_info.h"
#include "common/flags.h"
#include "common/heap_tuning.h"
#include "service/server_flags.h"
#include "service/server_run.h"

namespace {

constexpr char kUsage[] =
    "LLM inference over gRPC (kvserve.v1.Inference), with health, reflection "
    "and Prometheus metrics.\nUsage: kvserve --model models/stories260K.gguf "
    "[--listen 127.0.0.1:50051] [--metrics-listen 127.0.0.1:9464] [--tls-cert FILE "
    "--tls-key FILE [--tls-client-ca FILE]] [--auth-tokens FILE] [flags]\n"
    "Flags accept - or _ (--metrics-listen or --metrics_listen). SIGTERM drains and "
    "exits 0.";

}  // namespace

int main(int argc, char** argv) {
  // Session cache fetches move ~1 MB buffers: keep them out of page faults.
  kvserve::common::TuneHeapForLargeBuffers();
  namespace backends = kvserve::backends;
  namespace service = kvserve::service;
  // Once the flags are parsed: choose the OpenBLAS core (may re-execute this process)
  // and describe what runs. --version does it too, so it reports the core that runs.
  const auto runtime = [argv] {
    const backends::cpu_blas::BlasCoreDecision blas =
        backends::cpu_blas::EnsureBestBlasCore("kvserve", service::BlasReexecFromFlag(), argv);
    const backends::RuntimeInfo info = backends::DescribeRuntime(service::BackendFromFlag(), blas);
    if (info.kernels_degraded) {
      std::fprintf(stderr,
                   "kvserve: warning: cpu_blas runs its scalar kernels (this CPU has no "
                   "AVX2 + FMA + F16C)\n");
    }
    return info;
  };
  return kvserve::common::RunFlagsOnlyMain(
      argc, argv, "kvserve", kUsage, "server_main.cc",
      [&runtime] { return backends::FormatVersion("kvserve", runtime()); },
      [&runtime]() -> absl::Status {
        // The BLAS core first: it may re-execute the process, which must happen before
        // anything opens files or starts threads (the options read TLS and token files).
        const backends::RuntimeInfo info = runtime();
        absl::StatusOr<service::ProcessOptions> options = service::ProcessOptionsFromFlags();
        if (!options.ok()) return options.status();
        return service::RunProcess(*std::move(options), info);
      });
}
