// kvserve-bench cache-trace: writes a synthetic conversation trace (bench/trace_generator.h)
// in the JSONL shape cache-replay reads. See --help.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "bench/trace_generator.h"
#include "cachesvc/trace_replay.h"

namespace {
const kvserve::bench::SyntheticTraceOptions kDefaults;
}  // namespace

ABSL_FLAG(std::string, output, "", "The JSONL trace file to write. Required.");
ABSL_FLAG(int64_t, conversations, kDefaults.conversations, "Conversations in the trace.");
ABSL_FLAG(double, conversations_per_s, kDefaults.conversations_per_s,
          "Mean arrival rate of new conversations (Poisson), per second.");
ABSL_FLAG(std::string, turns, "geometric",
          "Turns per conversation: geometric, pareto (1 + Lomax, heavy tail) or fixed.");
ABSL_FLAG(double, turns_mean, kDefaults.turns_mean, "Mean turns per conversation (>= 1).");
ABSL_FLAG(double, turns_alpha, kDefaults.turns_alpha,
          "Shape of --turns pareto (> 1; smaller = heavier tail).");
ABSL_FLAG(int64_t, max_turns, kDefaults.max_turns, "Turns per conversation are capped here.");
ABSL_FLAG(std::string, think, "exponential",
          "Think time (a turn's arrival to the conversation's next): exponential, lognormal or "
          "pareto (Lomax, heavy tail).");
ABSL_FLAG(double, think_mean_s, kDefaults.think_mean_s, "Mean think time, seconds.");
ABSL_FLAG(double, think_sigma, kDefaults.think_sigma,
          "--think lognormal: standard deviation of the log (> 0).");
ABSL_FLAG(double, think_alpha, kDefaults.think_alpha, "--think pareto: shape (> 1).");
ABSL_FLAG(double, first_prompt_mean_tokens, kDefaults.first_prompt_mean_tokens,
          "Mean tokens of a conversation's first user prompt (lognormal).");
ABSL_FLAG(double, prompt_mean_tokens, kDefaults.prompt_mean_tokens,
          "Mean tokens of each later user prompt (lognormal).");
ABSL_FLAG(double, prompt_sigma, kDefaults.prompt_sigma,
          "Standard deviation of the log of prompt lengths.");
ABSL_FLAG(double, answer_mean_tokens, kDefaults.answer_mean_tokens,
          "Mean tokens of an answer (output_length; lognormal).");
ABSL_FLAG(double, answer_sigma, kDefaults.answer_sigma,
          "Standard deviation of the log of answer lengths.");
ABSL_FLAG(int64_t, system_prompts, kDefaults.system_prompts,
          "Shared system prompts a conversation opens with (0 = none).");
ABSL_FLAG(int64_t, system_prompt_tokens, kDefaults.system_prompt_tokens,
          "Tokens of each system prompt.");
ABSL_FLAG(double, system_prompt_zipf, kDefaults.system_prompt_zipf,
          "Zipf exponent of the system prompts' popularity (0 = uniform).");
ABSL_FLAG(int32_t, hash_block_tokens, kDefaults.block_tokens,
          "Tokens per hash block (Mooncake's trace: 512).");

namespace kvserve::bench {
namespace {

constexpr char kUsage[] =
    R"(Usage: kvserve-bench cache-trace --output FILE [--seed N] [distribution flags]

Writes a synthetic conversation trace in the JSONL shape of Mooncake's (timestamp ms,
input_length, output_length, hash_ids of 512-token prefix blocks), for cache-replay.
Conversations arrive as a Poisson process; each has a number of turns, think times between
them, a first prompt, later prompts and answers (lognormal lengths), and may open with a
shared system prompt. Turn k's input is the system prompt, every earlier prompt and answer,
and its own prompt. Same flags and seed, same file. Prints a summary on stderr.
Flags accept - or _ (--turns-mean or --turns_mean).)";

absl::StatusOr<SyntheticTraceOptions> OptionsFromFlags() {
  SyntheticTraceOptions o;
  o.seed = absl::GetFlag(FLAGS_seed).value_or(1);
  o.conversations = absl::GetFlag(FLAGS_conversations);
  o.conversations_per_s = absl::GetFlag(FLAGS_conversations_per_s);
  const std::string turns = absl::GetFlag(FLAGS_turns);
  std::optional<TurnsDistribution> t = TurnsDistributionFromName(turns);
  if (!t) {
    return absl::InvalidArgumentError(
        absl::StrCat("--turns: unknown \"", turns, "\" (geometric, pareto or fixed)"));
  }
  o.turns = *t;
  o.turns_mean = absl::GetFlag(FLAGS_turns_mean);
  o.turns_alpha = absl::GetFlag(FLAGS_turns_alpha);
  o.max_turns = absl::GetFlag(FLAGS_max_turns);
  const std::string think = absl::GetFlag(FLAGS_think);
  std::optional<GapDistribution> g = GapDistributionFromName(think);
  if (!g) {
    return absl::InvalidArgumentError(
        absl::StrCat("--think: unknown \"", think, "\" (exponential, lognormal or pareto)"));
  }
  o.think = *g;
  o.think_mean_s = absl::GetFlag(FLAGS_think_mean_s);
  o.think_sigma = absl::GetFlag(FLAGS_think_sigma);
  o.think_alpha = absl::GetFlag(FLAGS_think_alpha);
  o.first_prompt_mean_tokens = absl::GetFlag(FLAGS_first_prompt_mean_tokens);
  o.prompt_mean_tokens = absl::GetFlag(FLAGS_prompt_mean_tokens);
  o.prompt_sigma = absl::GetFlag(FLAGS_prompt_sigma);
  o.answer_mean_tokens = absl::GetFlag(FLAGS_answer_mean_tokens);
  o.answer_sigma = absl::GetFlag(FLAGS_answer_sigma);
  o.system_prompts = absl::GetFlag(FLAGS_system_prompts);
  o.system_prompt_tokens = absl::GetFlag(FLAGS_system_prompt_tokens);
  o.system_prompt_zipf = absl::GetFlag(FLAGS_system_prompt_zipf);
  o.block_tokens = absl::GetFlag(FLAGS_hash_block_tokens);
  return o;
}

absl::Status RunTrace() {
  const std::string path = absl::GetFlag(FLAGS_output);
  if (path.empty()) return absl::InvalidArgumentError("--output is required");
  absl::StatusOr<SyntheticTraceOptions> options = OptionsFromFlags();
  if (!options.ok()) return options.status();
  absl::StatusOr<std::vector<cachesvc::TraceRequest>> trace = GenerateTrace(*options);
  if (!trace.ok()) return absl::InvalidArgumentError(trace.status().message());
  std::ofstream out(path);
  if (!out) return absl::NotFoundError(absl::StrCat("cannot write ", path));
  int64_t blocks = 0;
  uint64_t distinct = 0;
  for (const cachesvc::TraceRequest& req : *trace) {
    out << cachesvc::FormatTraceLine(req) << '\n';
    blocks += static_cast<int64_t>(req.hash_ids.size());
    for (uint64_t id : req.hash_ids) distinct = std::max(distinct, id + 1);
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("error writing ", path));
  const double hours =
      trace->empty() ? 0.0 : static_cast<double>(trace->back().timestamp_ms) / 3.6e6;
  std::fprintf(stderr,
               "wrote %zu requests of %lld conversations to %s: %lld blocks (%llu distinct, "
               "unlimited-capacity hit ratio %.3f), %.2f h\n",
               trace->size(), static_cast<long long>(options->conversations), path.c_str(),
               static_cast<long long>(blocks), static_cast<unsigned long long>(distinct),
               blocks == 0 ? 0.0 : 1.0 - static_cast<double>(distinct) / blocks, hours);
  return absl::OkStatus();
}

}  // namespace

Subcommand CacheTraceCommand() {
  return {
      .name = "cache-trace",
      .summary = "writes a synthetic conversation trace for cache-replay",
      .usage = kUsage,
      .file = __FILE__,
      .shared_flags = {{"seed", "Same flags and seed, same trace.", "1"}},
      .run = [](char**) { return RunTrace(); },
  };
}

}  // namespace kvserve::bench
