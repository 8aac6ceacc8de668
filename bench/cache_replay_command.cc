// kvserve-bench cache-replay: the session cache service's eviction policy on a request
// trace (the prefix-hit ratio per policy and capacity). See --help.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "cachesvc/block_index.h"
#include "cachesvc/trace_replay.h"

ABSL_FLAG(std::string, trace, "",
          "The JSONL request trace (Mooncake format) to replay through the block index. "
          "Required.");
ABSL_FLAG(std::vector<std::string>, capacity_blocks, {},
          "cache capacity in blocks; comma-separated for several runs. Required.");
ABSL_FLAG(std::vector<std::string>, policy, std::vector<std::string>{"conversation"},
          "eviction policy, conversation, lru or optimum (Belady's offline optimum, the "
          "reference); comma-separated for several.");
ABSL_FLAG(int64_t, max_requests, 0, "replay only the first N requests (0 = all).");
ABSL_FLAG(int64_t, reuse_credit_ticks, -1,
          "BlockIndexOptions::reuse_credit_ticks of the conversation policy "
          "(-1 = its default).");
ABSL_FLAG(int64_t, history_blocks, -1,
          "BlockIndexOptions::history_blocks of the conversation policy "
          "(-1 = its default).");
ABSL_FLAG(int64_t, conversation_credit_ticks, -1,
          "BlockIndexOptions::conversation_credit_ticks of the conversation policy "
          "(-1 = its default, 0 = off).");

namespace kvserve::bench {
namespace {

constexpr char kOptimum[] = "optimum";

constexpr char kUsage[] =
    R"(Usage: kvserve-bench cache-replay --trace FILE --capacity-blocks N[,N...]
           [--policy conversation|lru|optimum[,...]] [--json]

For each request of the trace in order: the longest prefix of its blocks present in a
cache of N blocks counts as hits; then every block of the request is inserted (each 1
unit, evicting by the policy; `optimum` is Belady's offline optimum at the block level,
which reads the future: the ceiling for any policy). Prints the prefix-hit ratio (hit blocks / all blocks), the
counts and the replay time, one line per (policy, capacity).
Flags accept - or _ (--capacity-blocks or --capacity_blocks).)";

absl::Status RunReplay() {
  const std::string path = absl::GetFlag(FLAGS_trace);
  if (path.empty()) return absl::InvalidArgumentError("--trace is required");
  std::vector<uint64_t> capacities;
  for (const std::string& text : absl::GetFlag(FLAGS_capacity_blocks)) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(text, &n) || n == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--capacity-blocks: \"", text, "\" is not a positive integer"));
    }
    capacities.push_back(n);
  }
  if (capacities.empty()) return absl::InvalidArgumentError("--capacity-blocks is required");
  // nullopt: the offline optimum.
  std::vector<std::optional<cachesvc::Policy>> policies;
  for (const std::string& name : absl::GetFlag(FLAGS_policy)) {
    std::optional<cachesvc::Policy> p = cachesvc::PolicyFromName(name);
    if (!p && name != kOptimum) {
      return absl::InvalidArgumentError(
          absl::StrCat("--policy: unknown \"", name, "\" (conversation, lru or optimum)"));
    }
    policies.push_back(p);
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
  for (const std::optional<cachesvc::Policy>& policy : policies) {
    for (uint64_t capacity : capacities) {
      cachesvc::ReplayOptions options;
      options.capacity_blocks = capacity;
      if (policy) options.policy = *policy;
      options.reuse_credit_ticks = absl::GetFlag(FLAGS_reuse_credit_ticks);
      options.history_blocks = absl::GetFlag(FLAGS_history_blocks);
      options.conversation_credit_ticks = absl::GetFlag(FLAGS_conversation_credit_ticks);
      absl::StatusOr<cachesvc::ReplayResult> r =
          policy ? cachesvc::Replay(*trace, options) : cachesvc::ReplayOptimum(*trace, options);
      if (!r.ok()) return r.status();
      const std::string name(policy ? cachesvc::PolicyName(*policy) : kOptimum);
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

}  // namespace

Subcommand CacheReplayCommand() {
  return {
      .name = "cache-replay",
      .summary = "the session cache's eviction policy on a request trace: prefix-hit ratio",
      .usage = kUsage,
      .file = __FILE__,
      .shared_flags = {{"json"}},
      .run = [](char**) { return RunReplay(); },
  };
}

}  // namespace kvserve::bench
