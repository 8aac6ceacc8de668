// Conversions between the wire API (kvserve.v1) and the engine: request validation
// (every invalid field is INVALID_ARGUMENT naming the proto field) and the engine's
// results back into messages. Stateless functions; thread-safe.
#ifndef KVSERVE_SERVICE_REQUEST_CONVERT_H_
#define KVSERVE_SERVICE_REQUEST_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "kvserve/v1/inference.pb.h"
#include "model/tokenizer.h"

namespace kvserve::service {

// Limits a request is validated against.
struct RequestLimits {
  int32_t vocab_size = 0;              // token ids must be in [0, vocab_size)
  int32_t context_length = 0;          // prompt tokens must be < context_length
  int32_t max_tokens_limit = 4096;     // largest accepted max_tokens
  int32_t default_max_tokens = 256;    // max_tokens when unset
  int64_t max_prompt_bytes = 1 << 20;  // prompt.text size limit
  int32_t max_cache_salt_bytes = 256;
  int32_t max_session_id_bytes = 128;
};

// Validates `request` and builds the engine request. `history_tokens` is the length of
// the session's stored history (0 for a stateless request or an empty session): text
// prompts get BOS only when it is 0, and history + prompt must fit the context.
// Errors: INVALID_ARGUMENT whose message starts with the offending field
// ("sampling.top_p must be in (0, 1], got 2").
absl::StatusOr<engine::Request> ToEngineRequest(const v1::GenerateRequest& request,
                                                const RequestLimits& limits,
                                                const model::Tokenizer& tokenizer,
                                                int32_t history_tokens, absl::Time deadline);

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
