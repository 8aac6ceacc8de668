// The session cache's reason to exist, measured: a follow-up turn on a replica that has
// never seen the conversation, with its history fetched from kvserve-cache (remote
// reuse), against the same turn recomputed from scratch (cold). Both run on fresh
// engines over one loaded model, side by side, alternating, in one process; the cache
// service is a real kvserve-cache server on loopback (in-process), reached over gRPC.
#ifndef KVSERVE_BENCH_REUSE_BENCH_H_
#define KVSERVE_BENCH_REUSE_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::bench {

struct ReuseBenchOptions {
  std::string model_path;          // GGUF file. Required.
  std::vector<int32_t> histories;  // history lengths in tokens. Default {1024, 4096}.
  int32_t new_tokens = 16;         // the follow-up turn's own tokens
  int32_t repeats = 5;             // remote and cold runs per history (median)
  int32_t threads = 0;             // backend threads; 0 = all cores
  std::string kv_dtype = "f16";
};

struct ReuseBenchRow {
  int32_t history_tokens = 0;
  std::vector<double> remote_ttft_seconds;  // one per repeat
  std::vector<double> cold_ttft_seconds;
  int32_t cached_tokens_remote = 0;    // of the last remote run
  double fetched_gb_per_second = 0.0;  // record bytes / time in fetch calls
  int64_t fetched_bytes = 0;           // per remote run
};

// Errors: the model cannot be loaded, the server cannot start, a request fails, or a
// remote run did not fetch its history (then the measurement would be meaningless).
absl::StatusOr<std::vector<ReuseBenchRow>> RunReuseBench(const ReuseBenchOptions& options);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_REUSE_BENCH_H_
