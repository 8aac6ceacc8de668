// The per-request sampler: turns one row of logits into the next token.
#ifndef KVSERVE_ENGINE_SAMPLER_H_
#define KVSERVE_ENGINE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling_params.h"

namespace kvserve::engine {

// One (token, log-probability) pair reported alongside a sampled token.
struct LogprobEntry {
  int32_t token = 0;
  float logprob = 0.0f;
};

// What Sample() reports besides the token.
struct SampleInfo {
  // log softmax of the ORIGINAL logits (before penalties and temperature) at the
  // chosen token.
  float logprob = 0.0f;
  // The params.top_logprobs most likely tokens under the original logits, most likely
  // first (ties: lower id first). Empty when top_logprobs == 0.
  std::vector<LogprobEntry> top_logprobs;
};

// Chooses tokens for one request.
//
// Order of operations in Sample():
//   1. penalties on the logits: repetition (CTRL-style: a logit l of a token seen
//      anywhere in `context` becomes l / r if l > 0, else l * r), then frequency and
//      presence (l -= f * count + p * [count > 0], counting only the generated tokens
//      context[prompt_len:]);
//   2. temperature == 0: greedy, the argmax of the penalised logits, ties to the lowest
//      id; steps 3-8 are skipped and the RNG is not advanced;
//   3. divide by temperature;
//   4. top-k (k > 0): keep the k largest logits (ties to the lowest id);
//   5. softmax over the kept tokens;
//   6. top-p (< 1): keep the smallest most-likely-first prefix whose mass reaches p
//      (at least one token);
//   7. min-p (> 0): drop tokens with probability < min_p * max probability;
//   8. renormalise and draw ONE uniform double in [0, 1) from the request's RNG; walk
//      the kept tokens and pick the first whose cumulative probability exceeds it. The
//      walk goes most likely first (ties: lower id) when top-k or top-p is active, else
//      in id order (sorting the whole vocabulary would only cost time).
// Step 3 is computed as (l - max) / temperature, so tiny temperatures cannot overflow.
//
// Determinism: the RNG (std::mt19937_64, fully specified by the C++ standard, with our
// own uniform conversion) is seeded from params.seed, or from `fallback_seed` when
// the request has no seed. The same seed and the same sequence of logits give the same
// tokens regardless of batching, threads or other requests.
//
// Threading: one Sampler per request; not thread-safe (Sample mutates the RNG and
// scratch buffers). Copyable and movable.
class Sampler {
 public:
  // Validates `params` (SamplingParams::Validate with no max_tokens limit beyond
  // int32) against `vocab_size` (> 0); INVALID_ARGUMENT naming the field on failure.
  static absl::StatusOr<Sampler> Create(const SamplingParams& params, int32_t vocab_size,
                                        uint64_t fallback_seed);

  // Picks the next token in [0, vocab_size).
  //   logits:     [vocab_size]; modified in place (penalties, temperature). Only the
  //               first min(logits.size(), vocab_size) entries are considered; an empty
  //               span returns 0.
  //   context:    prompt + generated tokens so far; ids outside [0, vocab_size) are
  //               ignored by the penalties.
  //   prompt_len: how many leading tokens of `context` are the prompt (clamped to
  //               [0, context.size()]).
  //   info:       may be null; when given, filled as documented on SampleInfo.
  // NaN logits are treated as -infinity. If every logit is -infinity or NaN, returns
  // the lowest id among the candidates (token 0 in the greedy path).
  int32_t Sample(std::span<float> logits, std::span<const int32_t> context, int32_t prompt_len,
                 SampleInfo* info);

  // Speculative verification of one proposed token `draft` (a deterministic proposal:
  // an n-gram match, a draft model's greedy choice) against the target's `logits`: the
  // token Sample() picks, with *accepted = (it is the draft); when it is, the caller may
  // go on to the next position's logits. This is Leviathan et al.'s rejection sampling
  // for a one-hot proposal distribution (accept with probability min(1, p(d) / q(d)) =
  // p(d); on rejection draw from p without d, renormalised) with both draws made from
  // Sample()'s one uniform: the emitted tokens are exactly those of decoding without
  // drafts, for greedy and seeded sampled requests alike, and the RNG advances once per
  // emitted token as it does without drafts. (A source proposing a distribution q, not
  // one token, needs the residual max(0, p - q) draw instead.)
  int32_t SampleDraft(std::span<float> logits, std::span<const int32_t> context, int32_t prompt_len,
                      int32_t draft, SampleInfo* info, bool* accepted);

  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }

 private:
  Sampler(const SamplingParams& params, int32_t vocab_size, uint64_t seed);

  void ApplyPenalties(std::span<float> logits, std::span<const int32_t> context,
                      int32_t prompt_len);
  void FillLogprobs(std::span<const float> original, int32_t token, SampleInfo* info);
  int32_t SampleStochastic(std::span<float> logits);
  double NextUniform();  // [0, 1), 53 random bits

  SamplingParams params_;
  int32_t vocab_size_ = 0;
  std::mt19937_64 rng_;
  // Scratch, reused across calls to avoid per-token allocation.
  std::vector<float> original_;  // [vocab] copy of the incoming logits
  // [vocab] occurrences in generated tokens, all-zero between calls; empty unless a
  // frequency or presence penalty is set.
  std::vector<int32_t> counts_;
  // [vocab] token seen in context, all-zero between calls; empty unless
  // repetition_penalty != 1.
  std::vector<uint8_t> seen_;
  std::vector<int32_t> candidates_;  // token ids still in play
  std::vector<float> probs_;         // [candidates] probabilities, parallel to candidates_
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_SAMPLER_H_
