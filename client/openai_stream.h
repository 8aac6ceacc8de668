// The OpenAI-compatible HTTP API (kvserve's, docs/http-api.md) as the load
// generator speaks it, without any I/O: a GenerateRequest as the JSON body of a streamed
// POST /v1/chat/completions or /v1/completions, the `data:` payloads of its answer as
// StreamPieces, and error answers as statuses. client/http_stream_source.h does the I/O.
#ifndef KVSERVE_CLIENT_OPENAI_STREAM_H_
#define KVSERVE_CLIENT_OPENAI_STREAM_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/stream_source.h"
#include "kvserve/v1/inference.pb.h"

namespace kvserve::client::bench {

enum class HttpEndpoint {
  kChat,         // POST /v1/chat/completions
  kCompletions,  // POST /v1/completions
};

// "chat" or "completions"; INVALID_ARGUMENT for another name.
absl::StatusOr<HttpEndpoint> ParseHttpEndpoint(std::string_view name);
// "/v1/chat/completions" or "/v1/completions".
std::string_view HttpEndpointPath(HttpEndpoint endpoint);

// The JSON body streaming `request` from model `model`: "stream": true,
// "stream_options": {"include_usage": true}, and each field the request sets:
//   prompt      chat: messages as they are, a text as one user message;
//               completions: "prompt", the text or the token ids
//   max_tokens, stop, and sampling: temperature, top_p, seed, presence_penalty,
//               frequency_penalty (when set or not zero); top_k, min_p,
//               repetition_penalty, stop_token_ids, ignore_eos, cache_salt and
//               session_id as kvserve's extension fields
//   top_logprobs > 0   chat: "logprobs": true, "top_logprobs": N; completions: "logprobs": N
// INVALID_ARGUMENT (naming the field) for what the endpoint cannot carry: token ids to
// chat, messages to completions, no prompt, and parse_special (no HTTP field).
absl::StatusOr<std::string> StreamRequestBody(const v1::GenerateRequest& request,
                                              HttpEndpoint endpoint, std::string_view model);

// One `data:` payload of a stream answered with 200:
//   a chunk -> the piece: text = choices[0].delta.content (chat) or choices[0].text
//              (completions), tokens = 1 when that text is not empty, usage from a
//              non-null "usage" (see StreamPiece);
//   "[DONE]" -> nullopt (the stream ended well);
//   {"error": {...}} -> its status: by error.code "rate_limit_exceeded"
//              RESOURCE_EXHAUSTED, "service_unavailable" UNAVAILABLE, "timeout"
//              DEADLINE_EXCEEDED, "internal_error" INTERNAL; else by error.type
//              "invalid_request_error" INVALID_ARGUMENT, else UNKNOWN; error.message as
//              message;
//   anything else -> INTERNAL "malformed stream chunk: ...".
absl::StatusOr<std::optional<StreamPiece>> ParseStreamData(std::string_view data,
                                                           HttpEndpoint endpoint);

// The "id" of the first model in a GET /v1/models answer ({"object": "list", "data":
// [{"id": ...}, ...]}): INTERNAL when `body` is no such answer, FAILED_PRECONDITION when
// the list is empty.
absl::StatusOr<std::string> FirstModelId(std::string_view body);

// The status of an answer that is not 200: the code of HTTP status `http_status`
// (400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND,
// 405 UNIMPLEMENTED, 408 and 504 DEADLINE_EXCEEDED, 413 and 429 RESOURCE_EXHAUSTED,
// 499 CANCELLED, 500 INTERNAL, 501 UNIMPLEMENTED, 502 and 503 UNAVAILABLE; other 4xx
// FAILED_PRECONDITION, other 5xx UNKNOWN), with "HTTP <status>: " and the body's
// error.message (or the body itself, up to 200 bytes) as message.
absl::Status HttpErrorStatus(int http_status, std::string_view body);

}  // namespace kvserve::client::bench

#endif  // KVSERVE_CLIENT_OPENAI_STREAM_H_
