#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>

#include "absl/status/status.h"

namespace kvserve::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params, int32_t vocab_size,
                                        uint64_t fallback_seed) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError("vocab_size must be > 0");
  }
  absl::Status status =
      params.Validate(vocab_size, std::numeric_limits<int32_t>::max(), StopLimits::Unlimited());
  if (!status.ok()) return status;
  return Sampler(params, vocab_size, params.seed.value_or(fallback_seed));
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size, uint64_t seed)
    : params_(params), vocab_size_(vocab_size), rng_(seed) {
  // The [vocab] penalty tables only when their penalty is on: most requests use none,
  // and a 128k vocabulary would otherwise cost ~640 KB of zeroing per request.
  if (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) {
    counts_.assign(static_cast<size_t>(vocab_size), 0);
  }
  if (params_.repetition_penalty != 1.0f) seen_.assign(static_cast<size_t>(vocab_size), 0);
}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> context,
                        int32_t prompt_len, SampleInfo* info) {
  const size_t n = std::min(logits.size(), static_cast<size_t>(vocab_size_));
  if (n == 0) return 0;
  logits = logits.first(n);
  for (float& l : logits) {
    if (std::isnan(l)) l = kNegInf;
  }
  if (info != nullptr) original_.assign(logits.begin(), logits.end());

  ApplyPenalties(logits, context, prompt_len);

  int32_t token = 0;
  if (params_.temperature == 0.0f) {
    // Greedy: strict '>' keeps the lowest id among equal maxima.
    for (size_t i = 1; i < n; ++i) {
      if (logits[i] > logits[static_cast<size_t>(token)]) token = static_cast<int32_t>(i);
    }
  } else {
    token = SampleStochastic(logits);
  }

  if (info != nullptr) FillLogprobs(original_, token, info);
  return token;
}

int32_t Sampler::SampleDraft(std::span<float> logits, std::span<const int32_t> context,
                             int32_t prompt_len, int32_t draft, SampleInfo* info, bool* accepted) {
  const int32_t token = Sample(logits, context, prompt_len, info);
  *accepted = token == draft;
  return token;
}

void Sampler::ApplyPenalties(std::span<float> logits, std::span<const int32_t> context,
                             int32_t prompt_len) {
  const int32_t n = static_cast<int32_t>(logits.size());
  auto in_range = [n](int32_t t) { return t >= 0 && t < n; };

  if (params_.repetition_penalty != 1.0f) {
    const float r = params_.repetition_penalty;
    for (int32_t t : context) {
      if (!in_range(t) || seen_[static_cast<size_t>(t)] != 0) continue;
      seen_[static_cast<size_t>(t)] = 1;
      float& l = logits[static_cast<size_t>(t)];
      l = l > 0.0f ? l / r : l * r;
    }
    for (int32_t t : context) {
      if (in_range(t)) seen_[static_cast<size_t>(t)] = 0;
    }
  }

  if (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) {
    const size_t start = static_cast<size_t>(
        std::clamp<int64_t>(prompt_len, 0, static_cast<int64_t>(context.size())));
    const std::span<const int32_t> generated = context.subspan(start);
    for (int32_t t : generated) {
      if (in_range(t)) ++counts_[static_cast<size_t>(t)];
    }
    for (int32_t t : generated) {
      if (!in_range(t)) continue;
      int32_t& count = counts_[static_cast<size_t>(t)];
      if (count == 0) continue;  // already applied for this token
      logits[static_cast<size_t>(t)] -=
          params_.frequency_penalty * static_cast<float>(count) + params_.presence_penalty;
      count = 0;  // restores the all-zero invariant
    }
  }
}

int32_t Sampler::SampleStochastic(std::span<float> logits) {
  // Candidates: every token with a finite (or +inf) logit.
  candidates_.clear();
  float max_logit = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == kNegInf) continue;
    candidates_.push_back(static_cast<int32_t>(i));
    max_logit = std::max(max_logit, logits[i]);
  }
  if (candidates_.empty()) return 0;
  if (std::isinf(max_logit)) {
    // +inf logits: the lowest such id takes all the mass.
    for (int32_t t : candidates_) {
      if (logits[static_cast<size_t>(t)] == max_logit) return t;
    }
  }

  // Temperature, relative to the maximum so that nothing overflows: values are <= 0.
  const float temperature = params_.temperature;
  for (int32_t t : candidates_) {
    float& l = logits[static_cast<size_t>(t)];
    l = (l - max_logit) / temperature;
  }

  // Most likely first, ties to the lower id: a strict total order, so results are
  // deterministic whatever the algorithm.
  auto more_likely = [&logits](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)];
    const float lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };

  const size_t k = static_cast<size_t>(params_.top_k);
  if (k > 0 && k < candidates_.size()) {
    std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(k),
                     candidates_.end(), more_likely);
    candidates_.resize(k);
  }

  // Softmax (unnormalised weights; the maximum has weight 1 unless top-k removed it,
  // which it cannot: it is the most likely token).
  probs_.resize(candidates_.size());
  double total = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    probs_[i] = std::exp(logits[static_cast<size_t>(candidates_[i])]);
    total += probs_[i];
  }

  if (params_.top_p < 1.0f) {
    // Tokens with p < (1 - top_p) / (count - 1) cannot be in the nucleus: all of them
    // together weigh less than 1 - top_p (llama2.c's trick). Drop them before sorting,
    // unless that would drop everything.
    const size_t count = candidates_.size();
    if (count > 1) {
      const double cutoff = (1.0 - params_.top_p) / static_cast<double>(count - 1) * total;
      size_t kept = 0;
      for (size_t i = 0; i < count; ++i) {
        if (probs_[i] >= cutoff) ++kept;
      }
      if (kept > 0 && kept < count) {
        size_t w = 0;
        for (size_t i = 0; i < count; ++i) {
          if (probs_[i] >= cutoff) {
            candidates_[w] = candidates_[i];
            probs_[w] = probs_[i];
            ++w;
          }
        }
        candidates_.resize(w);
        probs_.resize(w);
      }
    }
    std::sort(candidates_.begin(), candidates_.end(), more_likely);
    for (size_t i = 0; i < candidates_.size(); ++i) {
      probs_[i] = std::exp(logits[static_cast<size_t>(candidates_[i])]);
    }
    const double target = static_cast<double>(params_.top_p) * total;
    double cumulative = 0.0;
    size_t keep = candidates_.size();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += probs_[i];
      if (cumulative >= target) {
        keep = i + 1;
        break;
      }
    }
    candidates_.resize(keep);
    probs_.resize(keep);
  } else if (k > 0) {
    std::sort(candidates_.begin(), candidates_.end(), more_likely);
    for (size_t i = 0; i < candidates_.size(); ++i) {
      probs_[i] = std::exp(logits[static_cast<size_t>(candidates_[i])]);
    }
  }

  if (params_.min_p > 0.0f) {
    const float p_max = *std::max_element(probs_.begin(), probs_.end());
    const float threshold = params_.min_p * p_max;
    size_t w = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (probs_[i] >= threshold) {
        candidates_[w] = candidates_[i];
        probs_[w] = probs_[i];
        ++w;
      }
    }
    candidates_.resize(w);  // w >= 1: the maximum always passes
    probs_.resize(w);
  }

  // Renormalise implicitly: draw u in [0, mass) and walk.
  double mass = 0.0;
  for (float p : probs_) mass += p;
  const double u = NextUniform() * mass;
  double cumulative = 0.0;
  int32_t last_possible = candidates_.front();  // the maximum: weight 1 (or at least > 0)
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (probs_[i] <= 0.0f) continue;  // underflowed to 0 at a low temperature
    cumulative += probs_[i];
    last_possible = candidates_[i];
    if (u < cumulative) return candidates_[i];
  }
  return last_possible;  // rounding: u landed on the very end
}

void Sampler::FillLogprobs(std::span<const float> original, int32_t token, SampleInfo* info) {
  float max_logit = kNegInf;
  for (float l : original) max_logit = std::max(max_logit, l);
  double log_z = static_cast<double>(max_logit);
  if (std::isfinite(max_logit)) {
    double sum = 0.0;
    for (float l : original) sum += std::exp(static_cast<double>(l - max_logit));
    log_z += std::log(sum);
  }
  auto logprob = [&](int32_t t) -> float {
    const float l = original[static_cast<size_t>(t)];
    if (!std::isfinite(max_logit) || l == kNegInf) return kNegInf;
    return static_cast<float>(static_cast<double>(l) - log_z);
  };
  info->logprob = logprob(token);
  info->top_logprobs.clear();
  const size_t top = std::min(static_cast<size_t>(params_.top_logprobs), original.size());
  if (top == 0) return;
  candidates_.resize(original.size());
  std::iota(candidates_.begin(), candidates_.end(), 0);
  std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(top),
                    candidates_.end(), [&original](int32_t a, int32_t b) {
                      const float la = original[static_cast<size_t>(a)];
                      const float lb = original[static_cast<size_t>(b)];
                      return la > lb || (la == lb && a < b);
                    });
  for (size_t i = 0; i < top; ++i) {
    info->top_logprobs.push_back(LogprobEntry{candidates_[i], logprob(candidates_[i])});
  }
}

}  // namespace kvserve::engine
