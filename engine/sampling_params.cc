#include "engine/sampling_params.h"

#include <cmath>
#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvserve::engine {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + len > n) return false;
    const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < lo || c1 > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      const unsigned char ck = static_cast<unsigned char>(s[i + k]);
      if (ck < 0x80 || ck > 0xBF) return false;
    }
    i += len;
  }
  return true;
}

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
    if (!IsValidUtf8(s)) {
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
