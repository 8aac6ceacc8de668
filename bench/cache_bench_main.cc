// kvserve-cache-bench: measurements of the session cache service's parts. One mode per
// run, chosen by its flag (today --replay: the eviction policy on a request trace). See
// --help.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/reuse_bench.h"
#include "cachesvc/block_index.h"
#include "cachesvc/trace_replay.h"
#include "common/flags.h"
#include "common/stats.h"

ABSL_FLAG(std::string, replay, "",
          "Mode: replay this JSONL request trace (Mooncake format) through the block index "
          "and print the prefix-hit ratio.");
ABSL_FLAG(std::vector<std::string>, capacity_blocks, {},
          "--replay: cache capacity in blocks; comma-separated for several runs. Required.");
ABSL_FLAG(std::vector<std::string>, policy, std::vector<std::string>{"conversation"},
          "--replay: eviction policy, conversation or lru; comma-separated for several.");
ABSL_FLAG(int64_t, max_requests, 0, "--replay: replay only the first N requests (0 = all).");
ABSL_FLAG(int64_t, reuse_credit_ticks, -1,
          "--replay: BlockIndexOptions::reuse_credit_ticks of the conversation policy "
          "(-1 = its default).");
ABSL_FLAG(int64_t, history_blocks, -1,
          "--replay: BlockIndexOptions::history_blocks of the conversation policy "
          "(-1 = its default).");
ABSL_FLAG(std::string, reuse, "",
          "Mode: time to first token of a follow-up turn on a fresh replica with the history "
          "fetched from a kvserve-cache on loopback, against recomputing it; this GGUF model.");
ABSL_FLAG(std::vector<std::string>, history, std::vector<std::string>({"1024", "4096"}),
          "--reuse: history lengths in tokens, comma-separated.");
ABSL_FLAG(int32_t, repeats, 5, "--reuse: remote and cold runs per history (median).");
ABSL_FLAG(int32_t, threads, 0, "--reuse: backend threads; 0 = all cores.");
ABSL_FLAG(std::string, kv_dtype, "f32", "--reuse: KV element type, f32 or f16.");
ABSL_FLAG(int64_t, conversation_credit_ticks, -1,
          "--replay: BlockIndexOptions::conversation_credit_ticks of the conversation policy "
          "(-1 = its default, 0 = off).");
ABSL_FLAG(bool, json, false, "One JSON object per result line, nothing else on stdout.");

namespace {

namespace bench = kvserve::bench;
namespace cachesvc = kvserve::cachesvc;

constexpr char kUsage[] = R"(Usage: kvserve-cache-bench MODE [flags]

Modes:
  --replay TRACE --capacity-blocks N[,N...] [--policy conversation|lru[,...]] [--json]
      For each request of TRACE in order: the longest prefix of its blocks present in a
      cache of N blocks counts as hits; then every block of the request is inserted (each
      1 unit, evicting by the policy). Prints the prefix-hit ratio (hit blocks / all
      blocks), the counts and the replay time, one line per (policy, capacity).
  --reuse MODEL [--history 1024,4096] [--repeats 5] [--threads N] [--kv-dtype f32] [--json]
      A conversation's history is computed on one replica and written to a kvserve-cache
      server (in-process, gRPC on loopback); then its next turn (16 new tokens) runs on
      fresh replicas, alternately with the history fetched (remote) and recomputed
      (cold). Prints the median time to first token of both and their ratio.
Flags accept - or _ (--capacity-blocks or --capacity_blocks).)";

absl::Status RunReplay(const std::string& path) {
  std::vector<uint64_t> capacities;
  for (const std::string& text : absl::GetFlag(FLAGS_capacity_blocks)) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(text, &n) || n == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--capacity-blocks: \"", text, "\" is not a positive integer"));
    }
    capacities.push_back(n);
  }
  if (capacities.empty()) return absl::InvalidArgumentError("--replay needs --capacity-blocks");
  std::vector<cachesvc::Policy> policies;
  for (const std::string& name : absl::GetFlag(FLAGS_policy)) {
    std::optional<cachesvc::Policy> p = cachesvc::PolicyFromName(name);
    if (!p) {
      return absl::InvalidArgumentError(
          absl::StrCat("--policy: unknown \"", name, "\" (conversation or lru)"));
    }
    policies.push_back(*p);
  }
  const int64_t max_requests = absl::GetFlag(FLAGS_max_requests);
  if (max_requests < 0) return absl::InvalidArgumentError("--max-requests must be >= 0");
  const bool json = absl::GetFlag(FLAGS_json);

  const absl::Time read_start = absl::Now();
  absl::StatusOr<std::vector<cachesvc::TraceRequest>> trace =
      cachesvc::ReadTrace(path, max_requests);
  if (!trace.ok()) return trace.status();
  if (!json) {
    std::fprintf(stderr, "read %zu requests from %s in %.2f s\n", trace->size(), path.c_str(),
                 absl::ToDoubleSeconds(absl::Now() - read_start));
  }
  for (cachesvc::Policy policy : policies) {
    for (uint64_t capacity : capacities) {
      cachesvc::ReplayOptions options;
      options.capacity_blocks = capacity;
      options.policy = policy;
      options.reuse_credit_ticks = absl::GetFlag(FLAGS_reuse_credit_ticks);
      options.history_blocks = absl::GetFlag(FLAGS_history_blocks);
      options.conversation_credit_ticks = absl::GetFlag(FLAGS_conversation_credit_ticks);
      absl::StatusOr<cachesvc::ReplayResult> r = cachesvc::Replay(*trace, options);
      if (!r.ok()) return r.status();
      const std::string name(cachesvc::PolicyName(policy));
      if (json) {
        std::printf(
            "{\"mode\":\"replay\",\"policy\":\"%s\",\"capacity_blocks\":%llu,"
            "\"requests\":%lld,\"blocks\":%lld,\"hit_blocks\":%lld,\"hit_ratio\":%.6f,"
            "\"inserted_blocks\":%lld,\"evicted_blocks\":%lld,\"no_room_requests\":%lld,"
            "\"seconds\":%.3f}\n",
            name.c_str(), static_cast<unsigned long long>(capacity),
            static_cast<long long>(r->requests), static_cast<long long>(r->blocks),
            static_cast<long long>(r->hit_blocks), r->hit_ratio(),
            static_cast<long long>(r->inserted_blocks), static_cast<long long>(r->evicted_blocks),
            static_cast<long long>(r->no_room_requests), absl::ToDoubleSeconds(r->elapsed));
      } else {
        std::printf(
            "%-12s capacity %8llu blocks: prefix-hit ratio %.4f (%lld of %lld blocks), "
            "%lld inserted, %lld evicted, %.2f s\n",
            name.c_str(), static_cast<unsigned long long>(capacity), r->hit_ratio(),
            static_cast<long long>(r->hit_blocks), static_cast<long long>(r->blocks),
            static_cast<long long>(r->inserted_blocks), static_cast<long long>(r->evicted_blocks),
            absl::ToDoubleSeconds(r->elapsed));
      }
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

absl::Status RunReuse(const std::string& model) {
  bench::ReuseBenchOptions options;
  options.model_path = model;
  options.histories.clear();
  for (const std::string& text : absl::GetFlag(FLAGS_history)) {
    int32_t n = 0;
    if (!absl::SimpleAtoi(text, &n) || n < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("--history: \"", text, "\" is not an integer >= 16"));
    }
    options.histories.push_back(n);
  }
  options.repeats = absl::GetFlag(FLAGS_repeats);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.kv_dtype = absl::GetFlag(FLAGS_kv_dtype);
  absl::StatusOr<std::vector<bench::ReuseBenchRow>> rows = bench::RunReuseBench(options);
  if (!rows.ok()) return rows.status();
  const bool json = absl::GetFlag(FLAGS_json);
  for (const bench::ReuseBenchRow& r : *rows) {
    const double remote = kvserve::common::Percentile(r.remote_ttft_seconds, 0.5);
    const double cold = kvserve::common::Percentile(r.cold_ttft_seconds, 0.5);
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

int main(int argc, char** argv) {
  const std::vector<std::string> args =
      kvserve::common::ParseFlags(argc, argv, kUsage, "cache_bench_main.cc");
  if (args.size() > 1) {
    std::fprintf(stderr, "kvserve-cache-bench: unexpected argument \"%s\" (see --help)\n",
                 args[1].c_str());
    return 2;
  }
  absl::Status status;
  const std::string replay = absl::GetFlag(FLAGS_replay);
  const std::string reuse = absl::GetFlag(FLAGS_reuse);
  if (!replay.empty() && !reuse.empty()) {
    status = absl::InvalidArgumentError("choose one mode: --replay or --reuse");
  } else if (!replay.empty()) {
    status = RunReplay(replay);
  } else if (!reuse.empty()) {
    status = RunReuse(reuse);
  } else {
    status =
        absl::InvalidArgumentError("choose a mode: --replay TRACE or --reuse MODEL (see --help)");
  }
  if (status.ok()) return 0;
  std::fprintf(stderr, "kvserve-cache-bench: %s\n", status.ToString().c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}
