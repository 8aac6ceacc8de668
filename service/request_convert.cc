#include "service/request_convert.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "engine/field_error.h"

namespace kvserve::service {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// engine::Request field paths that GenerateRequest spells differently, longest match
// first; every other path (sampling.top_p, cache_salt, ...) is the same in both. An
// engine path matches an entry when it equals it or continues with '[' or '.'.
struct FieldRename {
  absl::string_view engine;
  absl::string_view proto;
};
constexpr FieldRename kFieldRenames[] = {
    {"sampling.max_tokens", "max_tokens"},
    {"sampling.stop_strings", "stop"},
    {"sampling.stop_token_ids", "stop_token_ids"},
    {"sampling.top_logprobs", "top_logprobs"},
    {"sampling.max_draft_tokens", "max_draft_tokens"},
};

std::string ProtoFieldPath(absl::string_view path) {
  // The prompt: one id of it, or the prompt as a whole (empty, too long).
  if (absl::ConsumePrefix(&path, "prompt_tokens")) {
    return path.empty() ? "prompt" : absl::StrCat("prompt.tokens.ids", path);
  }
  for (const FieldRename& r : kFieldRenames) {
    if (absl::StartsWith(path, r.engine) &&
        (path.size() == r.engine.size() || path[r.engine.size()] == '[' ||
         path[r.engine.size()] == '.')) {
      return absl::StrCat(r.proto, path.substr(r.engine.size()));
    }
  }
  return std::string(path);
}

}  // namespace

absl::Status WithProtoFieldNames(const absl::Status& engine_status) {
  const std::optional<std::string> field = engine::ErrorField(engine_status);
  if (!field.has_value()) return engine_status;
  // Still a FieldError: the HTTP front maps the proto path on to the OpenAI API's names.
  return engine::FieldError(ProtoFieldPath(*field), engine::ErrorReason(engine_status));
}

namespace {

engine::SamplingParams ToSamplingParams(const v1::GenerateRequest& request,
                                        const RequestLimits& limits) {
  engine::SamplingParams params;
  const v1::SamplingParams& s = request.sampling();
  if (s.has_temperature()) params.temperature = s.temperature();
  params.top_k = s.top_k();
  if (s.has_top_p()) params.top_p = s.top_p();
  params.min_p = s.min_p();
  if (s.has_repetition_penalty()) params.repetition_penalty = s.repetition_penalty();
  params.frequency_penalty = s.frequency_penalty();
  params.presence_penalty = s.presence_penalty();
  if (s.has_seed()) params.seed = s.seed();
  params.max_tokens = request.has_max_tokens() ? request.max_tokens() : limits.default_max_tokens;
  params.stop_token_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  params.stop_strings.assign(request.stop().begin(), request.stop().end());
  params.ignore_eos = request.ignore_eos();
  params.top_logprobs = request.top_logprobs();
  if (request.has_max_draft_tokens()) params.max_draft_tokens = request.max_draft_tokens();
  return params;
}

}  // namespace

absl::Status CheckSessionId(const std::string& id, const RequestLimits& limits, const char* field) {
  if (id.empty()) return Invalid(absl::StrCat(field, " must not be empty"));
  if (static_cast<int64_t>(id.size()) > limits.max_session_id_bytes) {
    return Invalid(absl::StrCat(field, " is ", id.size(), " bytes, at most ",
                                limits.max_session_id_bytes, " allowed"));
  }
  return absl::OkStatus();
}

namespace {

// Renders and encodes prompt.messages into `out` (see ToEngineRequest).
absl::Status ConvertMessages(const v1::Conversation& conversation, const RequestLimits& limits,
                             const model::ChatPrompter* chat, engine::Request* out) {
  if (conversation.messages_size() > limits.max_messages) {
    return Invalid(absl::StrCat("prompt.messages has ", conversation.messages_size(),
                                " messages, at most ", limits.max_messages, " allowed"));
  }
  std::vector<model::ChatMessage> messages;
  messages.reserve(conversation.messages_size());
  int64_t content_bytes = 0;
  for (const v1::Message& m : conversation.messages()) {
    content_bytes += static_cast<int64_t>(m.content().size());
    if (content_bytes > limits.max_prompt_bytes) {
      return Invalid(
          absl::StrCat("prompt.messages contents exceed ", limits.max_prompt_bytes, " bytes"));
    }
    messages.push_back({m.role(), m.content()});
  }
  if (chat == nullptr) {
    return absl::FailedPreconditionError("chat messages are not available on this server");
  }
  absl::StatusOr<model::ChatPrompter::Prompt> prompt = chat->Encode(messages);
  if (!prompt.ok()) {
    // Render names "messages[i].role"; the wire path is one level deeper.
    if (absl::IsInvalidArgument(prompt.status())) {
      return Invalid(absl::StrCat("messages.", prompt.status().message()));
    }
    return prompt.status();
  }
  out->prompt_tokens = std::move(prompt->tokens);
  out->turn_separator = std::move(prompt->turn_separator);
  out->turn_end_token = prompt->turn_end_token;
  out->add_bos = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<engine::Request> ToEngineRequest(const v1::GenerateRequest& request,
                                                const RequestLimits& limits,
                                                const model::Tokenizer& tokenizer,
                                                absl::Time deadline,
                                                const model::ChatPrompter* chat) {
  if (!request.session_id().empty()) {
    if (absl::Status s = CheckSessionId(request.session_id(), limits, "session_id"); !s.ok()) {
      return s;
    }
  }
  engine::Request out;
  out.sampling = ToSamplingParams(request, limits);
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText:
      if (static_cast<int64_t>(request.text().size()) > limits.max_prompt_bytes) {
        return Invalid(absl::StrCat("prompt.text is ", request.text().size(), " bytes, at most ",
                                    limits.max_prompt_bytes, " allowed"));
      }
      out.prompt_tokens =
          tokenizer.Encode(request.text(), /*add_bos=*/false, request.parse_special());
      out.add_bos = true;
      break;
    case v1::GenerateRequest::kTokens:
      out.prompt_tokens.assign(request.tokens().ids().begin(), request.tokens().ids().end());
      break;
    case v1::GenerateRequest::kMessages:
      if (absl::Status s = ConvertMessages(request.messages(), limits, chat, &out); !s.ok()) {
        return s;
      }
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      break;  // only a turn of a session with history may be empty: the engine decides
  }
  out.session_id = request.session_id();
  out.cache_salt = request.cache_salt();
  out.deadline = deadline;
  return out;
}

v1::FinishReason ToProtoFinishReason(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case engine::FinishReason::kStopString:
      return v1::FINISH_REASON_STOP_STRING;
    case engine::FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kCancelled:
    case engine::FinishReason::kDeadline:
    case engine::FinishReason::kError:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

absl::Status FinishStatus(engine::FinishReason reason, const absl::Status& engine_status) {
  switch (reason) {
    case engine::FinishReason::kStop:
    case engine::FinishReason::kStopString:
    case engine::FinishReason::kLength:
      return absl::OkStatus();
    case engine::FinishReason::kDeadline:
      return absl::DeadlineExceededError("deadline exceeded while generating");
    case engine::FinishReason::kCancelled:
      return engine_status.ok() ? absl::CancelledError("request cancelled") : engine_status;
    case engine::FinishReason::kError:
      break;
  }
  return engine_status.ok() ? absl::InternalError("generation failed") : engine_status;
}

namespace {
void SetDuration(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t nanos = absl::ToInt64Nanoseconds(d);
  out->set_seconds(nanos / 1000000000);
  out->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}
}  // namespace

void ToProtoUsage(const engine::Usage& usage, v1::Usage* out) {
  out->set_prompt_tokens(usage.prompt_tokens);
  out->set_cached_tokens_local(usage.cached_tokens);
  out->set_cached_tokens_remote(usage.cached_tokens_remote);
  out->set_computed_tokens(usage.computed_tokens);
  out->set_completion_tokens(usage.completion_tokens);
  out->set_draft_tokens(usage.draft_tokens);
  out->set_draft_tokens_accepted(usage.draft_tokens_accepted);
  SetDuration(usage.queue_time, out->mutable_queue_time());
  SetDuration(usage.time_to_first_token, out->mutable_time_to_first_token());
  SetDuration(usage.total_time, out->mutable_total_time());
}

void AppendToken(const engine::TokenEvent& event, bool with_logprobs,
                 google::protobuf::RepeatedField<int32_t>* token_ids,
                 google::protobuf::RepeatedPtrField<v1::TokenLogprobs>* logprobs) {
  // The held-back text flushed at a stop carries no token of its own.
  if (event.token == engine::kTextOnlyToken) return;
  token_ids->Add(event.token);
  if (!with_logprobs) return;
  v1::TokenLogprobs* lp = logprobs->Add();
  lp->set_token_id(event.token);
  lp->set_logprob(event.logprob);
  for (const engine::TokenLogprob& top : event.top_logprobs) {
    v1::TokenLogprob* t = lp->add_top();
    t->set_token_id(top.token);
    t->set_logprob(top.logprob);
  }
}

absl::StatusOr<absl::Duration> SessionTtl(const google::protobuf::Duration& ttl,
                                          const char* field) {
  if (ttl.seconds() < 0 || ttl.nanos() < 0 || ttl.nanos() >= 1000000000) {
    return Invalid(absl::StrCat(field, " must be a non-negative duration"));
  }
  return absl::Seconds(ttl.seconds()) + absl::Nanoseconds(ttl.nanos());
}

void ToProtoSession(const engine::SessionInfo& info, v1::Session* out) {
  out->set_session_id(info.id);
  out->set_history_tokens(info.history_tokens);
  const int64_t unix_nanos = absl::ToUnixNanos(info.expires_at);
  out->mutable_expire_time()->set_seconds(unix_nanos / 1000000000);
  out->mutable_expire_time()->set_nanos(static_cast<int32_t>(unix_nanos % 1000000000));
  out->set_busy(info.busy);
}

}  // namespace kvserve::service
