// Per-request sampling parameters and their validation.
#ifndef KVSERVE_ENGINE_SAMPLING_PARAMS_H_
#define KVSERVE_ENGINE_SAMPLING_PARAMS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kvserve::engine {

// Limits of the API itself, enforced by SamplingParams::Validate (requests beyond them
// are INVALID_ARGUMENT).
inline constexpr int32_t kMaxTopLogprobs = 20;      // top_logprobs upper bound
inline constexpr float kMaxAbsTokenPenalty = 2.0f;  // |frequency_penalty|, |presence_penalty|
inline constexpr int32_t kMaxDraftTokens = 64;      // max_draft_tokens, speculative draft_max

// Server-set limits on a request's stop conditions (Engine::Options::stop_limits; kvserve
// --max_stop_strings, --max_stop_string_bytes, --max_stop_token_ids). A request beyond one
// is INVALID_ARGUMENT naming the field and the limit. Matching cost per generated token
// grows with strings x bytes, so they stay small by default.
struct StopLimits {
  int32_t max_stop_strings = 16;        // stop_strings entries. Default 16.
  int32_t max_stop_string_bytes = 256;  // bytes per stop string. Default 256.
  int32_t max_stop_token_ids = 64;      // stop_token_ids entries. Default 64.

  // No limit (callers that validate parameters they built themselves).
  static StopLimits Unlimited();
};

// Defaults follow common practice (OpenAI / vLLM): sampling at temperature 1 with no
// truncation. Temperature 0 means greedy (argmax, ties to the lowest id).
struct SamplingParams {
  float temperature = 1.0f;               // >= 0; 0 = greedy
  int32_t top_k = 0;                      // 0 = off; else keep the k most likely tokens
  float top_p = 1.0f;                     // (0, 1]; 1 = off (nucleus sampling)
  float min_p = 0.0f;                     // [0, 1]; drop tokens with p < min_p * p_max
  float repetition_penalty = 1.0f;        // > 0; 1 = off (CTRL-style, over prompt + output)
  float frequency_penalty = 0.0f;         // [-2, 2]; subtract f * count(token in output)
  float presence_penalty = 0.0f;          // [-2, 2]; subtract p if token occurred in output
  std::optional<uint64_t> seed;           // same seed + same logits -> same tokens
  int32_t max_tokens = 256;               // >= 1 completion tokens
  std::vector<int32_t> stop_token_ids;    // finish when one is sampled (not emitted)
  std::vector<std::string> stop_strings;  // finish when the text contains one (not emitted)
  bool ignore_eos = false;                // keep going past EOS (benchmarks on random weights)
  int32_t top_logprobs = 0;               // [0, 20]: report the N most likely tokens per step
  // Speculative decoding: at most this many draft tokens per step, in [0, kMaxDraftTokens]; 0 = off
  // for this request; unset = the server's setting (which also bounds it).
  std::optional<int32_t> max_draft_tokens;

  // OK, or a FieldError (engine/field_error.h) naming the parameter relative to this
  // struct ("temperature", "stop_strings[2]"): message "temperature must be >= 0 and
  // finite, got nan".
  absl::Status Validate(int32_t vocab_size, int32_t max_tokens_limit,
                        const StopLimits& stop_limits) const;
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_SAMPLING_PARAMS_H_
