// How many tokens a request's context (session history + BOS + prompt) may hold: it
// must leave room for one generated token in the model's context and in the KV cache.
// Checked where a context is assembled (Engine::Submit, SessionStore::BeginTurn), once.
#ifndef KVSERVE_ENGINE_CONTEXT_LIMITS_H_
#define KVSERVE_ENGINE_CONTEXT_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"

namespace kvserve::engine {

struct ContextLimits {
  int32_t context_length = std::numeric_limits<int32_t>::max();      // the model's
  int64_t kv_capacity_tokens = std::numeric_limits<int64_t>::max();  // the KV pool's
};

// OK, or FieldError("prompt_tokens", ...) (engine/field_error.h) when the context is
// empty or leaves no room for a generated token; the message counts `history_tokens`.
absl::Status CheckContextFits(const ContextLimits& limits, size_t context_tokens,
                              int32_t history_tokens);

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_CONTEXT_LIMITS_H_
