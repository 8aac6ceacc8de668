#include "bench/trace_generator.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::bench {
namespace {

// Draws from the distributions the options name. Only std::mt19937_64's output (fixed by
// the standard) is used, never std::*_distribution (implementation-defined), so a seed gives
// the same trace with any standard library.
class Sampler {
 public:
  explicit Sampler(uint64_t seed) : rng_(seed) {}

  // Uniform in (0, 1].
  double Uniform() { return (static_cast<double>(rng_() >> 11) + 1.0) * 0x1.0p-53; }
  double Exponential(double mean) { return -mean * std::log(Uniform()); }
  double StandardNormal() {  // Box-Muller
    return std::sqrt(-2.0 * std::log(Uniform())) * std::cos(2.0 * std::numbers::pi * Uniform());
  }
  // Lognormal with this mean; sigma = standard deviation of its log.
  double Lognormal(double mean, double sigma) {
    return mean * std::exp(sigma * StandardNormal() - 0.5 * sigma * sigma);
  }
  // Lomax (Pareto II, support [0, inf)) of shape alpha > 1 with this mean.
  double Lomax(double mean, double alpha) {
    return mean * (alpha - 1.0) * (std::pow(Uniform(), -1.0 / alpha) - 1.0);
  }
  // Geometric on {1, 2, ...} with this mean (>= 1).
  int64_t Geometric(double mean) {
    if (mean <= 1.0) return 1;
    return 1 + static_cast<int64_t>(std::floor(std::log(Uniform()) / std::log1p(-1.0 / mean)));
  }
  // Index in [0, cdf.size()) with P(i) = cdf[i] - cdf[i - 1]; cdf ends at 1.
  size_t Pick(const std::vector<double>& cdf) {
    const double u = 1.0 - Uniform();  // [0, 1)
    return std::min<size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin(),
                            cdf.size() - 1);
  }

 private:
  std::mt19937_64 rng_;
};

absl::Status CheckOptions(const SyntheticTraceOptions& o) {
  const auto bad = [](absl::string_view field, absl::string_view range) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic trace: ", field, " must be ", range));
  };
  if (o.conversations < 1) return bad("conversations", ">= 1");
  if (!(o.conversations_per_s > 0)) return bad("conversations_per_s", "> 0");
  if (!(o.turns_mean >= 1)) return bad("turns_mean", ">= 1");
  if (!(o.turns_alpha > 1)) return bad("turns_alpha", "> 1");
  if (o.max_turns < 1) return bad("max_turns", ">= 1");
  if (!(o.think_mean_s >= 0)) return bad("think_mean_s", ">= 0");
  if (!(o.think_sigma > 0)) return bad("think_sigma", "> 0");
  if (!(o.think_alpha > 1)) return bad("think_alpha", "> 1");
  if (!(o.first_prompt_mean_tokens >= 1)) return bad("first_prompt_mean_tokens", ">= 1");
  if (!(o.prompt_mean_tokens >= 1)) return bad("prompt_mean_tokens", ">= 1");
  if (!(o.answer_mean_tokens >= 1)) return bad("answer_mean_tokens", ">= 1");
  if (!(o.prompt_sigma >= 0)) return bad("prompt_sigma", ">= 0");
  if (!(o.answer_sigma >= 0)) return bad("answer_sigma", ">= 0");
  if (o.system_prompts < 0) return bad("system_prompts", ">= 0");
  if (o.system_prompts > 0 && o.system_prompt_tokens < 1) {
    return bad("system_prompt_tokens", ">= 1 when there are system prompts");
  }
  if (!(o.system_prompt_zipf >= 0)) return bad("system_prompt_zipf", ">= 0");
  if (o.block_tokens < 1) return bad("block_tokens", ">= 1");
  return absl::OkStatus();
}

int64_t Tokens(Sampler& s, double mean, double sigma) {
  return std::max<int64_t>(1, std::llround(s.Lognormal(mean, sigma)));
}

// What a block holds, before ids are numbered: a full block of system prompt `owner`, or
// block `index` of conversation `owner` up to token `end` (a partial block differs from
// the full block at the same index).
using BlockContent = std::tuple<bool, int64_t, int64_t, int64_t>;  // (shared, owner, index, end)

struct Pending {
  int64_t timestamp_ms;
  int64_t conversation;
  int64_t turn;
  int64_t input_length;
  int64_t output_length;
  int64_t system_prompt;  // -1: none
};

}  // namespace

std::optional<TurnsDistribution> TurnsDistributionFromName(std::string_view name) {
  if (name == "geometric") return TurnsDistribution::kGeometric;
  if (name == "pareto") return TurnsDistribution::kPareto;
  if (name == "fixed") return TurnsDistribution::kFixed;
  return std::nullopt;
}

std::optional<GapDistribution> GapDistributionFromName(std::string_view name) {
  if (name == "exponential") return GapDistribution::kExponential;
  if (name == "lognormal") return GapDistribution::kLognormal;
  if (name == "pareto") return GapDistribution::kPareto;
  return std::nullopt;
}

absl::StatusOr<std::vector<cachesvc::TraceRequest>> GenerateTrace(const SyntheticTraceOptions& o) {
  if (absl::Status s = CheckOptions(o); !s.ok()) return s;
  Sampler sampler(o.seed);
  std::vector<double> system_cdf;
  for (int64_t i = 0; i < o.system_prompts; ++i) {
    const double w = std::pow(static_cast<double>(i + 1), -o.system_prompt_zipf);
    system_cdf.push_back((system_cdf.empty() ? 0.0 : system_cdf.back()) + w);
  }
  for (double& c : system_cdf) c /= system_cdf.back();

  std::vector<Pending> pending;
  double start_s = 0;
  for (int64_t c = 0; c < o.conversations; ++c) {
    start_s += sampler.Exponential(1.0 / o.conversations_per_s);
    int64_t turns = 1;
    switch (o.turns) {
      case TurnsDistribution::kGeometric:
        turns = sampler.Geometric(o.turns_mean);
        break;
      case TurnsDistribution::kPareto:
        turns = 1 + std::llround(sampler.Lomax(o.turns_mean - 1.0, o.turns_alpha));
        break;
      case TurnsDistribution::kFixed:
        turns = std::llround(o.turns_mean);
        break;
    }
    turns = std::clamp<int64_t>(turns, 1, o.max_turns);
    const int64_t system_prompt =
        o.system_prompts > 0 ? static_cast<int64_t>(sampler.Pick(system_cdf)) : -1;
    int64_t history = system_prompt >= 0 ? o.system_prompt_tokens : 0;
    double t_s = start_s;
    for (int64_t k = 0; k < turns; ++k) {
      if (k > 0) {
        switch (o.think) {
          case GapDistribution::kExponential:
            t_s += sampler.Exponential(o.think_mean_s);
            break;
          case GapDistribution::kLognormal:
            t_s += sampler.Lognormal(o.think_mean_s, o.think_sigma);
            break;
          case GapDistribution::kPareto:
            t_s += sampler.Lomax(o.think_mean_s, o.think_alpha);
            break;
        }
      }
      const int64_t prompt = k == 0 ? Tokens(sampler, o.first_prompt_mean_tokens, o.prompt_sigma)
                                    : Tokens(sampler, o.prompt_mean_tokens, o.prompt_sigma);
      const int64_t answer = Tokens(sampler, o.answer_mean_tokens, o.answer_sigma);
      history += prompt;
      pending.push_back(Pending{std::llround(t_s * 1000.0), c, k, history, answer, system_prompt});
      history += answer;
    }
  }
  std::sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
    return std::tie(a.timestamp_ms, a.conversation, a.turn) <
           std::tie(b.timestamp_ms, b.conversation, b.turn);
  });

  absl::flat_hash_map<BlockContent, uint64_t> ids;
  std::vector<cachesvc::TraceRequest> trace;
  trace.reserve(pending.size());
  const int64_t block = o.block_tokens;
  for (const Pending& p : pending) {
    cachesvc::TraceRequest& req = trace.emplace_back();
    req.timestamp_ms = p.timestamp_ms;
    req.input_length = p.input_length;
    req.output_length = p.output_length;
    const int64_t system_tokens = p.system_prompt >= 0 ? o.system_prompt_tokens : 0;
    for (int64_t i = 0; i * block < p.input_length; ++i) {
      const int64_t end = std::min((i + 1) * block, p.input_length);
      const BlockContent content = (i + 1) * block <= system_tokens
                                       ? BlockContent{true, p.system_prompt, i, end}
                                       : BlockContent{false, p.conversation, i, end};
      const auto [it, fresh] = ids.try_emplace(content, ids.size());
      req.hash_ids.push_back(it->second);
    }
  }
  return trace;
}

}  // namespace kvserve::bench
