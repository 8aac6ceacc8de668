// The checks of a request's own fields, as Engine::Submit runs them (once, before any
// work): every invalid field is a FieldError (engine/field_error.h) naming its
// engine::Request path. A free function so that it can be tested and fuzzed without an
// engine.
#ifndef KVSERVE_ENGINE_REQUEST_VALIDATION_H_
#define KVSERVE_ENGINE_REQUEST_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/engine.h"

namespace kvserve::engine {

// What a request is checked against (the model and Engine::Options).
struct RequestRules {
  int32_t vocab_size = 0;
  int32_t max_tokens_limit = 4096;     // largest sampling.max_tokens
  int32_t max_cache_salt_bytes = 256;  // longest cache_salt
  StopLimits stop_limits;              // stop strings and stop token ids
  bool has_tokenizer = true;           // stop strings need one
};

// OK, or the first invalid field: "prompt_tokens[i]" (outside [0, vocab)), "sampling.*"
// (SamplingParams::Validate), "sampling.stop_strings" (no tokenizer), "cache_salt" (too
// long). The context's length is checked later, against the session's history.
absl::Status ValidateRequest(const Request& request, const RequestRules& rules);

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_REQUEST_VALIDATION_H_
