// Conversions between the wire API (kvserve.v1) and the engine: requests in (checking
// only the wire's own limits; the engine validates every field, and its field errors
// come back renamed to proto paths), results back into messages. Stateless functions;
// thread-safe.
#ifndef KVSERVE_SERVICE_REQUEST_CONVERT_H_
#define KVSERVE_SERVICE_REQUEST_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "kvserve/v1/inference.pb.h"
#include "model/chat_prompter.h"
#include "model/tokenizer.h"

namespace kvserve::service {

// What the service itself checks before a request reaches the engine: limits that exist
// only on the wire. Everything else (token ids, sampling parameters, cache_salt, the
// context length) is validated once, by engine::Engine::Submit.
struct RequestLimits {
  int32_t default_max_tokens = 256;    // max_tokens when unset
  int64_t max_prompt_bytes = 1 << 20;  // prompt.text size limit (checked before tokenizing);
                                       // also the messages' contents together
  int32_t max_messages = 1024;         // prompt.messages length limit
  int32_t max_session_id_bytes = 128;
};

// Converts `request` into an engine request: text is tokenized without BOS and asks for
// one (engine::Request::add_bos: the engine adds it only where the context starts),
// control-token strings in it staying text unless request.parse_special(); token ids
// are passed as they are; messages are rendered and encoded by `chat` (with BOS as for
// text, and the template's turn separator for a session turn). Checks only RequestLimits
// (INVALID_ARGUMENT naming prompt.text, prompt.messages or session_id) and, for messages,
// the roles (INVALID_ARGUMENT naming messages.messages[i].role) and that the model has a
// usable chat template (FAILED_PRECONDITION; also when `chat` is null).
absl::StatusOr<engine::Request> ToEngineRequest(const v1::GenerateRequest& request,
                                                const RequestLimits& limits,
                                                const model::Tokenizer& tokenizer,
                                                absl::Time deadline,
                                                const model::ChatPrompter* chat = nullptr);

// An engine FieldError (engine/field_error.h) renamed to the proto's field path
// ("sampling.max_tokens" -> "max_tokens", "prompt_tokens[3]" -> "prompt.tokens.ids[3]",
// "sampling.stop_strings[0]" -> "stop[0]", "prompt_tokens" -> "prompt"); any other status
// unchanged.
absl::Status WithProtoFieldNames(const absl::Status& engine_status);

// The wire finish reason of a successful generation (kStop, kStopString, kLength);
// FINISH_REASON_UNSPECIFIED for the others (they end with a non-OK status).
v1::FinishReason ToProtoFinishReason(engine::FinishReason reason);

// The status a generation that ended with `reason` gives the client: OK for stop/length,
// DEADLINE_EXCEEDED for kDeadline, CANCELLED for kCancelled, `engine_status` (or
// INTERNAL when that is OK) for kError.
absl::Status FinishStatus(engine::FinishReason reason, const absl::Status& engine_status);

void ToProtoUsage(const engine::Usage& usage, v1::Usage* out);
// Appends the token id (and logprobs when asked) of `event`; an event that carries only
// text (token == engine::kTextOnlyToken) adds nothing here: its text is the caller's.
void AppendToken(const engine::TokenEvent& event, bool with_logprobs,
                 google::protobuf::RepeatedField<int32_t>* token_ids,
                 google::protobuf::RepeatedPtrField<v1::TokenLogprobs>* logprobs);

// Checks a session id field of a session RPC: INVALID_ARGUMENT naming `field` when it is
// empty or longer than limits.max_session_id_bytes (the id is not echoed then, so an
// error never carries a client's megabyte back).
absl::Status CheckSessionId(const std::string& id, const RequestLimits& limits, const char* field);

// Converts a session TTL (unset = 0 = the engine's default; the engine enforces its
// maximum). INVALID_ARGUMENT naming `field` when negative or malformed.
absl::StatusOr<absl::Duration> SessionTtl(const google::protobuf::Duration& ttl, const char* field);

void ToProtoSession(const engine::SessionInfo& info, v1::Session* out);

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_REQUEST_CONVERT_H_
