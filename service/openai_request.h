// The OpenAI API's request bodies (POST /v1/chat/completions, /v1/completions) read into
// kvserve's own request (kvserve.v1.GenerateRequest) plus what only the HTTP front uses
// (n, stream, the logprobs shape, echo). Only the JSON is checked here (syntax, nesting,
// types, ranges that exist only in this API); every field the gRPC API shares is
// validated once, later, by the same code as for gRPC (service/request_convert.h, the
// engine). Stateless functions; thread-safe.
//
// Errors: INVALID_ARGUMENT as an engine FieldError (engine/field_error.h) whose field
// is the OpenAI parameter ("temperature", "messages[1].role"), or without a field for
// malformed JSON.
#ifndef KVSERVE_SERVICE_OPENAI_REQUEST_H_
#define KVSERVE_SERVICE_OPENAI_REQUEST_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvserve/v1/inference.pb.h"

namespace kvserve::service {

enum class ApiKind { kChatCompletions, kCompletions };

struct OpenAiRequest {
  ApiKind kind = ApiKind::kChatCompletions;
  std::string model;
  // Prompt (messages, text or token ids), sampling, max_tokens, stop, top_logprobs and
  // kvserve's extension fields (top_k, min_p, repetition_penalty, ignore_eos,
  // cache_salt, session_id, stop_token_ids, parse_special).
  v1::GenerateRequest generate;
  int32_t n = 1;               // choices; choice i samples with seed + i when a seed is given
  bool stream = false;         // server-sent events
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // report each token's log-probability
  bool echo = false;           // completions: the prompt before the completion text
};

struct OpenAiLimits {
  int32_t max_n = 8;       // largest `n`
  int32_t max_depth = 64;  // deepest JSON nesting accepted (checked before parsing)
};

// Reads a request body of `kind`. INVALID_ARGUMENT (see above) for anything malformed;
// unknown fields are ignored (the SDKs send new ones), null counts as absent.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(ApiKind kind, absl::string_view body,
                                                 const OpenAiLimits& limits);

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_OPENAI_REQUEST_H_
