// The OpenAI API's response bodies and errors, written from kvserve's results: a whole
// completion (chat.completion, text_completion), the server-sent-event chunks of a
// streamed one, usage, and {"error": {...}} bodies with their HTTP status. Stateless
// functions over immutable inputs; thread-safe.
#ifndef KVSERVE_SERVICE_OPENAI_RESPONSE_H_
#define KVSERVE_SERVICE_OPENAI_RESPONSE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"
#include "model/tokenizer.h"
#include "service/openai_request.h"

namespace kvserve::service {

// What every response of one request repeats.
struct ResponseContext {
  ApiKind kind = ApiKind::kChatCompletions;
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;    // the served model name
  std::string system_fingerprint;
  const model::Tokenizer* tokenizer = nullptr;  // token texts of logprobs
  bool logprobs = false;
  bool include_usage = false;  // streams: "usage": null on every chunk, then a usage chunk
};

// One choice's output so far (or whole).
struct ChoiceOutput {
  std::string text;
  // The generated tokens with their logprobs (text-only events excluded); kept only
  // when ResponseContext::logprobs.
  std::vector<engine::TokenEvent> tokens;
  int32_t prev_token = -1;  // the token before tokens[0] (for its text), -1: none
  std::optional<engine::FinishReason> finish;
};

// The whole response of a request that was not streamed. `usage` is choice 0's, with
// the completion tokens of all choices.
std::string CompletionBody(const ResponseContext& ctx, std::span<const ChoiceOutput> choices,
                           const engine::Usage& usage);

// The "data: ...\n\n" events of choice `index`'s new output in a stream, "" when there is
// none. Chat: `first` adds the choice's opening event (delta role "assistant", content
// ""), new text or tokens a content delta, `out.finish` a last event with an empty delta
// and the finish reason. Completions: one event with the text (and finish reason).
std::string StreamChunk(const ResponseContext& ctx, int32_t index, const ChoiceOutput& out,
                        bool first);
// The usage event (stream_options.include_usage) and the end of the stream.
std::string StreamUsageChunk(const ResponseContext& ctx, const engine::Usage& usage);
inline constexpr char kStreamDone[] = "data: [DONE]\n\n";

// GET /v1/models/{id} and GET /v1/models: the model object and a list of it.
std::string ModelBody(const std::string& id, int64_t created);
std::string ModelListBody(const std::string& id, int64_t created);

// An error as the OpenAI API answers it.
struct HttpError {
  int status = 500;
  std::string body;          // {"error": {"message", "type", "param", "code"}}
  bool retry_after = false;  // add Retry-After (429, 503)
};
// `status` (not OK) as an HTTP error. INVALID_ARGUMENT's field (engine/field_error.h; an
// OpenAI parameter, or a kvserve.v1 path that is renamed to one) becomes "param".
HttpError ToHttpError(const absl::Status& status, ApiKind kind);
// An error of the HTTP layer itself (unknown path, method, body too large).
HttpError MakeHttpError(int status, const std::string& message, const std::string& code,
                        const std::string& param = "");
// The event a stream ends with when it fails after it started.
std::string StreamErrorEvent(const HttpError& error);

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_OPENAI_RESPONSE_H_
