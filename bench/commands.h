// The subcommands of kvserve-bench (bench/bench_main.cc), one file each: each file
// defines its own flags, reads them into its options and does the work.
#ifndef KVSERVE_BENCH_COMMANDS_H_
#define KVSERVE_BENCH_COMMANDS_H_

#include "bench/tool_main.h"

namespace kvserve::bench {

Subcommand BackendCommand();          // backend_command.cc: prefill/decode per backend
Subcommand EngineCommand();           // engine_command.cc: follow-up TTFT, stream throughput
Subcommand SpeculativeCommand();      // speculative_command.cc: drafts on vs off
Subcommand ServiceCommand();          // service_command.cc: the gRPC layer's cost
Subcommand TokenizerCommand();        // tokenizer_command.cc: vocabulary load, encode speed
Subcommand CacheReplayCommand();      // cache_replay_command.cc: eviction policy on a trace
Subcommand CacheTraceCommand();       // cache_trace_command.cc: synthetic conversation traces
Subcommand CacheReuseCommand();       // cache_reuse_command.cc: remote history vs recompute
Subcommand CacheThroughputCommand();  // cache_throughput_command.cc: kvserve-cache store/fetch
Subcommand CacheStorageCommand();     // cache_storage_command.cc: disk and Redis tiers
Subcommand MkmodelCommand();          // mkmodel_command.cc: synthetic GGUF writer
Subcommand GenerateCommand();         // generate_command.cc: offline generation
Subcommand TokenizeCommand();         // tokenize_command.cc: offline tokenization

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_COMMANDS_H_
