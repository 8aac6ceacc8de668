// Synthetic conversation traces in Mooncake's request-trace shape (cachesvc::TraceRequest:
// timestamp, input and output lengths, chained prefix-block ids), with configurable
// distributions of conversation arrivals, turns, think times, prompt and answer lengths and
// shared system prompts: traffic of other shapes than the one trace the cache policy was
// first measured on (kvserve-bench cache-trace writes them, cache-replay replays them).
#ifndef KVSERVE_BENCH_TRACE_GENERATOR_H_
#define KVSERVE_BENCH_TRACE_GENERATOR_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cachesvc/trace_replay.h"

namespace kvserve::bench {

// Turns per conversation (always >= 1, at most max_turns).
enum class TurnsDistribution {
  kGeometric,  // P(n) = (1 - p)^(n - 1) p, p = 1 / turns_mean
  kPareto,     // 1 + round(Z), Z Lomax (Pareto II) of shape turns_alpha, mean turns_mean - 1
  kFixed,      // round(turns_mean)
};
// Think time: seconds from one turn's arrival to the next turn of the same conversation.
enum class GapDistribution {
  kExponential,  // mean think_mean_s
  kLognormal,    // mean think_mean_s, think_sigma the standard deviation of its log
  kPareto,       // Lomax of shape think_alpha, mean think_mean_s (heavy tail)
};
std::optional<TurnsDistribution> TurnsDistributionFromName(std::string_view name);
std::optional<GapDistribution> GapDistributionFromName(std::string_view name);

// Every field's default is the flag default of kvserve-bench cache-trace. Lengths are
// lognormal (mean and standard deviation of the log given), at least 1 token.
struct SyntheticTraceOptions {
  uint64_t seed = 1;  // same options and seed, same trace (bit for bit)
  int64_t conversations = 3000;
  double conversations_per_s = 1.0;  // Poisson arrivals of new conversations
  TurnsDistribution turns = TurnsDistribution::kGeometric;
  double turns_mean = 3.0;   // >= 1 (before the max_turns cap)
  double turns_alpha = 2.0;  // kPareto shape, > 1 (smaller = heavier tail)
  int64_t max_turns = 200;
  GapDistribution think = GapDistribution::kExponential;
  double think_mean_s = 60.0;
  double think_sigma = 1.0;                  // kLognormal, > 0
  double think_alpha = 1.5;                  // kPareto shape, > 1
  double first_prompt_mean_tokens = 2000.0;  // the first turn's user text (documents, code)
  double prompt_mean_tokens = 300.0;         // each later turn's user text
  double prompt_sigma = 1.0;
  double answer_mean_tokens = 350.0;  // output_length; the next turn's input includes it
  double answer_sigma = 0.8;
  // Conversations open with one of `system_prompts` shared prompts of system_prompt_tokens
  // each, picked with Zipf(system_prompt_zipf) popularity; 0 = no shared prefix.
  int64_t system_prompts = 20;
  int64_t system_prompt_tokens = 2048;
  double system_prompt_zipf = 1.0;  // >= 0 (0 = uniform)
  int32_t block_tokens = 512;       // tokens per hash block, as Mooncake's trace
};

// A trace of options.conversations conversations, requests sorted by timestamp (ms; ties
// in conversation then turn order). A request's input is its conversation's system prompt,
// then every earlier turn's prompt and answer, then its own prompt; its hash_ids name its
// ceil(input / block_tokens) blocks, equal ids for equal prefixes (a full block of a system
// prompt is shared by every conversation that uses it; a conversation's partial last block
// is its own and is not shared by its next turn), numbered 0, 1, 2... in order of first
// appearance as in Mooncake's remapped trace. INVALID_ARGUMENT (naming the field) for an
// option out of its documented range.
absl::StatusOr<std::vector<cachesvc::TraceRequest>> GenerateTrace(
    const SyntheticTraceOptions& options);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_TRACE_GENERATOR_H_
