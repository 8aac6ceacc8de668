#include "engine/sampling_params.h"

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/field_error.h"
#include "model/utf8.h"

namespace kvserve::engine {

StopLimits StopLimits::Unlimited() {
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  return StopLimits{kNone, kNone, kNone};
}

absl::Status SamplingParams::Validate(int32_t vocab_size, int32_t max_tokens_limit,
                                      const StopLimits& stop_limits) const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return FieldError("temperature", absl::StrCat("must be >= 0 and finite, got ", temperature));
  }
  if (top_k < 0 || top_k > vocab_size) {
    return FieldError("top_k",
                      absl::StrCat("must be in [0, ", vocab_size, "] (0 = off), got ", top_k));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {  // also rejects NaN
    return FieldError("top_p", absl::StrCat("must be in (0, 1], got ", top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return FieldError("min_p", absl::StrCat("must be in [0, 1], got ", min_p));
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f) {
    return FieldError("repetition_penalty",
                      absl::StrCat("must be > 0 and finite, got ", repetition_penalty));
  }
  if (!(frequency_penalty >= -kMaxAbsTokenPenalty && frequency_penalty <= kMaxAbsTokenPenalty)) {
    return FieldError("frequency_penalty",
                      absl::StrCat("must be in [-", kMaxAbsTokenPenalty, ", ", kMaxAbsTokenPenalty,
                                   "], got ", frequency_penalty));
  }
  if (!(presence_penalty >= -kMaxAbsTokenPenalty && presence_penalty <= kMaxAbsTokenPenalty)) {
    return FieldError("presence_penalty",
                      absl::StrCat("must be in [-", kMaxAbsTokenPenalty, ", ", kMaxAbsTokenPenalty,
                                   "], got ", presence_penalty));
  }
  if (max_tokens < 1 || max_tokens > max_tokens_limit) {
    return FieldError("max_tokens",
                      absl::StrCat("must be in [1, ", max_tokens_limit, "], got ", max_tokens));
  }
  if (stop_token_ids.size() > static_cast<size_t>(stop_limits.max_stop_token_ids)) {
    return FieldError(
        "stop_token_ids",
        absl::StrCat("has ", stop_token_ids.size(), " entries, at most ",
                     stop_limits.max_stop_token_ids, " allowed (the server's max_stop_token_ids)"));
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] < 0 || stop_token_ids[i] >= vocab_size) {
      return FieldError(absl::StrCat("stop_token_ids[", i, "]"),
                        absl::StrCat("must be in [0, ", vocab_size, "), got ", stop_token_ids[i]));
    }
  }
  if (stop_strings.size() > static_cast<size_t>(stop_limits.max_stop_strings)) {
    return FieldError(
        "stop_strings",
        absl::StrCat("has ", stop_strings.size(), " entries, at most ",
                     stop_limits.max_stop_strings, " allowed (the server's max_stop_strings)"));
  }
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    const std::string& s = stop_strings[i];
    if (s.empty()) {
      return FieldError(absl::StrCat("stop_strings[", i, "]"), "must not be empty");
    }
    if (s.size() > static_cast<size_t>(stop_limits.max_stop_string_bytes)) {
      return FieldError(
          absl::StrCat("stop_strings[", i, "]"),
          absl::StrCat("is ", s.size(), " bytes, at most ", stop_limits.max_stop_string_bytes,
                       " allowed (the server's max_stop_string_bytes)"));
    }
    if (!model::IsValidUtf8(s)) {
      return FieldError(absl::StrCat("stop_strings[", i, "]"), "is not valid UTF-8");
    }
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return FieldError("top_logprobs",
                      absl::StrCat("must be in [0, ", kMaxTopLogprobs, "], got ", top_logprobs));
  }
  if (max_draft_tokens.has_value() &&
      (*max_draft_tokens < 0 || *max_draft_tokens > kMaxDraftTokens)) {
    return FieldError("max_draft_tokens", absl::StrCat("must be in [0, ", kMaxDraftTokens,
                                                       "], got ", *max_draft_tokens));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
