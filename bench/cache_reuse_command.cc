// kvserve-bench cache-reuse: time to first token of a follow-up turn on a fresh replica
// with the history fetched from a kvserve-cache on loopback, against recomputing it
// (bench/reuse_bench.h). See --help.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "bench/reuse_bench.h"
#include "bench/tool_flags.h"
#include "common/stats.h"

namespace kvserve::bench {
namespace {

constexpr char kUsage[] =
    R"(Usage: kvserve-bench cache-reuse --model FILE [--history 1024,4096] [--repeats 5]
           [--threads N] [--kv-dtype f16|f32] [--json]

A conversation's history is computed on one replica and written to a kvserve-cache server
(in-process, gRPC on loopback); then its next turn (16 new tokens) runs on fresh replicas,
alternately with the history fetched (remote) and recomputed (cold). Prints the median
time to first token of both and their ratio.
Flags accept - or _ (--kv-dtype or --kv_dtype).)";

absl::Status RunReuse() {
  ReuseBenchOptions options;
  options.model_path = absl::GetFlag(FLAGS_model);
  if (options.model_path.empty()) return absl::InvalidArgumentError("--model is required");
  std::vector<int> histories;
  if (absl::Status s =
          ReadIntList("history", absl::GetFlag(FLAGS_history), 16, 1 << 24, &histories);
      !s.ok()) {
    return s;
  }
  options.histories.assign(histories.begin(), histories.end());
  options.repeats = absl::GetFlag(FLAGS_repeats);
  options.threads = absl::GetFlag(FLAGS_threads).value_or(0);
  options.kv_dtype = absl::GetFlag(FLAGS_kv_dtype);
  absl::StatusOr<std::vector<ReuseBenchRow>> rows = RunReuseBench(options);
  if (!rows.ok()) return rows.status();
  const bool json = absl::GetFlag(FLAGS_json);
  for (const ReuseBenchRow& r : *rows) {
    const double remote = common::Percentile(r.remote_ttft_seconds, 0.5);
    const double cold = common::Percentile(r.cold_ttft_seconds, 0.5);
    if (json) {
      std::printf(
          "{\"mode\":\"reuse\",\"history_tokens\":%d,\"remote_ttft_s\":%.4f,"
          "\"cold_ttft_s\":%.4f,\"speedup\":%.2f,\"cached_tokens_remote\":%d,"
          "\"fetched_bytes\":%lld,\"fetch_gb_per_s\":%.3f,\"repeats\":%zu}\n",
          r.history_tokens, remote, cold, cold / remote, r.cached_tokens_remote,
          static_cast<long long>(r.fetched_bytes), r.fetched_gb_per_second,
          r.remote_ttft_seconds.size());
    } else {
      std::printf(
          "history %5d tokens: TTFT remote %.3f s, cold %.3f s (median of %zu): %.1fx; "
          "%d tokens fetched (%.1f MB at %.2f GB/s)\n",
          r.history_tokens, remote, cold, r.remote_ttft_seconds.size(), cold / remote,
          r.cached_tokens_remote, r.fetched_bytes / 1e6, r.fetched_gb_per_second);
    }
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace

Subcommand CacheReuseCommand() {
  return {
      .name = "cache-reuse",
      .summary = "follow-up TTFT with the history fetched from kvserve-cache vs recomputed",
      .usage = kUsage,
      .file = __FILE__,
      .shared_flags = {{"model", "GGUF model file. Required."},
                       {"history", "History lengths in tokens (>= 16), comma-separated."},
                       {"repeats", "Remote and cold runs per history (median)."},
                       {"threads", "Backend threads; 0 = all cores.", "0"},
                       {"kv_dtype"},
                       {"json"}},
      .run = [](char**) { return RunReuse(); },
  };
}

}  // namespace kvserve::bench
