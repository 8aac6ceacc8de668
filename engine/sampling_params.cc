#include "engine/sampling_params.h"

#include <cmath>
#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/utf8.h"

namespace kvserve::engine {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

absl::Status SamplingParams::Validate(int32_t vocab_size, int32_t max_tokens_limit) const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return Invalid(absl::StrCat("temperature must be >= 0 and finite, got ", temperature));
  }
  if (top_k < 0 || top_k > vocab_size) {
    return Invalid(absl::StrCat("top_k must be in [0, ", vocab_size, "] (0 = off), got ", top_k));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {  // also rejects NaN
    return Invalid(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return Invalid(absl::StrCat("min_p must be in [0, 1], got ", min_p));
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f) {
    return Invalid(
        absl::StrCat("repetition_penalty must be > 0 and finite, got ", repetition_penalty));
  }
  if (!(frequency_penalty >= -kMaxAbsTokenPenalty && frequency_penalty <= kMaxAbsTokenPenalty)) {
    return Invalid(absl::StrCat("frequency_penalty must be in [-", kMaxAbsTokenPenalty, ", ",
                                kMaxAbsTokenPenalty, "], got ", frequency_penalty));
  }
  if (!(presence_penalty >= -kMaxAbsTokenPenalty && presence_penalty <= kMaxAbsTokenPenalty)) {
    return Invalid(absl::StrCat("presence_penalty must be in [-", kMaxAbsTokenPenalty, ", ",
                                kMaxAbsTokenPenalty, "], got ", presence_penalty));
  }
  if (max_tokens < 1 || max_tokens > max_tokens_limit) {
    return Invalid(
        absl::StrCat("max_tokens must be in [1, ", max_tokens_limit, "], got ", max_tokens));
  }
  if (stop_token_ids.size() > static_cast<size_t>(kMaxStopTokenIds)) {
    return Invalid(absl::StrCat("stop_token_ids has ", stop_token_ids.size(), " entries, at most ",
                                kMaxStopTokenIds, " allowed"));
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] < 0 || stop_token_ids[i] >= vocab_size) {
      return Invalid(absl::StrCat("stop_token_ids[", i, "] must be in [0, ", vocab_size, "), got ",
                                  stop_token_ids[i]));
    }
  }
  if (stop_strings.size() > static_cast<size_t>(kMaxStopStrings)) {
    return Invalid(absl::StrCat("stop_strings has ", stop_strings.size(), " entries, at most ",
                                kMaxStopStrings, " allowed"));
  }
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    const std::string& s = stop_strings[i];
    if (s.empty()) {
      return Invalid(absl::StrCat("stop_strings[", i, "] must not be empty"));
    }
    if (s.size() > static_cast<size_t>(kMaxStopStringBytes)) {
      return Invalid(absl::StrCat("stop_strings[", i, "] is ", s.size(), " bytes, at most ",
                                  kMaxStopStringBytes, " allowed"));
    }
    if (!model::IsValidUtf8(s)) {
      return Invalid(absl::StrCat("stop_strings[", i, "] is not valid UTF-8"));
    }
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return Invalid(
        absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs, "], got ", top_logprobs));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
