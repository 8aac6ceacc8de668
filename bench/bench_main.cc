// kvserve-bench: the benchmarks and offline tools, one subcommand each
// (`kvserve-bench --help` lists them; bench/commands.h says where each lives).
#include <string>

#include "absl/flags/flag.h"
#include "backends/cpu_blas/blas_startup.h"
#include "backends/runtime_info.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "bench/tool_main.h"
#include "common/heap_tuning.h"

int main(int argc, char** argv) {
  // As kvserve and kvserve-cache do (cache-reuse, cache-throughput measure their paths).
  kvserve::common::TuneHeapForLargeBuffers();
  namespace bench = kvserve::bench;
  const bench::Subcommand subcommands[] = {
      bench::BackendCommand(),     bench::EngineCommand(),          bench::ServiceCommand(),
      bench::TokenizerCommand(),   bench::CacheReplayCommand(),     bench::CacheTraceCommand(),
      bench::CacheReuseCommand(),  bench::CacheThroughputCommand(), bench::CacheStorageCommand(),
      bench::MkmodelCommand(),     bench::GenerateCommand(),        bench::TokenizeCommand(),
      bench::SpeculativeCommand(),
  };
  // --version names the BLAS core that would run (after a re-execution if need be).
  const auto version = [argv] {
    namespace backends = kvserve::backends;
    return backends::FormatVersion(
        "kvserve-bench",
        backends::DescribeRuntime("cpu_blas",
                                  backends::cpu_blas::EnsureBestBlasCore(
                                      "kvserve-bench", absl::GetFlag(FLAGS_blas_reexec), argv)));
  };
  return bench::ToolMain(argc, argv, "kvserve-bench", subcommands, version);
}
