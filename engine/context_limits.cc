#include "engine/context_limits.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/field_error.h"

namespace kvserve::engine {

absl::Status CheckContextFits(const ContextLimits& limits, size_t context_tokens,
                              int32_t history_tokens) {
  if (context_tokens == 0) {
    // A session turn may be empty when the session has history: generation continues it.
    return FieldError("prompt_tokens",
                      "must not be empty (only a turn of a session with history may be)");
  }
  const std::string history =
      history_tokens > 0 ? absl::StrCat(" (", history_tokens, " of them session history)") : "";
  if (context_tokens >= static_cast<size_t>(limits.context_length)) {
    return FieldError("prompt_tokens",
                      absl::StrCat("makes a context of ", context_tokens, " tokens", history,
                                   "; the model's context holds ", limits.context_length,
                                   " tokens including at least one generated token"));
  }
  if (static_cast<int64_t>(context_tokens) >= limits.kv_capacity_tokens) {
    return FieldError("prompt_tokens",
                      absl::StrCat("makes a context of ", context_tokens, " tokens", history,
                                   "; the KV cache holds ", limits.kv_capacity_tokens, " tokens"));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
