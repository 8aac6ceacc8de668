#include "service/openai_response.h"

#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/field_error.h"
#include "nlohmann/json.hpp"

namespace kvserve::service {
namespace {

using Json = nlohmann::json;

// Token texts may hold part of a character: invalid UTF-8 is replaced, never thrown on.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

const char* FinishReasonName(engine::FinishReason reason) {
  return reason == engine::FinishReason::kLength ? "length" : "stop";
}

Json Bytes(std::string_view piece) {
  Json bytes = Json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// The logprobs of `out`'s tokens in the shape of ctx.kind; `text_offset` is where the
// choice's text so far started (completions' text_offset).
Json LogprobsJson(const ResponseContext& ctx, const ChoiceOutput& out, size_t text_offset) {
  const model::Tokenizer& tok = *ctx.tokenizer;
  int32_t prev = out.prev_token;
  if (ctx.kind == ApiKind::kChatCompletions) {
    Json content = Json::array();
    for (const engine::TokenEvent& e : out.tokens) {
      const std::string_view piece = tok.PieceBytes(prev, e.token);
      Json top = Json::array();
      for (const engine::TokenLogprob& alt : e.top_logprobs) {
        const std::string_view alt_piece = tok.PieceBytes(prev, alt.token);
        top.push_back({{"token", std::string(alt_piece)},
                       {"logprob", alt.logprob},
                       {"bytes", Bytes(alt_piece)}});
      }
      content.push_back({{"token", std::string(piece)},
                         {"logprob", e.logprob},
                         {"bytes", Bytes(piece)},
                         {"top_logprobs", std::move(top)}});
      prev = e.token;
    }
    return {{"content", std::move(content)}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  for (const engine::TokenEvent& e : out.tokens) {
    const std::string_view piece = tok.PieceBytes(prev, e.token);
    tokens.push_back(std::string(piece));
    token_logprobs.push_back(e.logprob);
    Json alts = Json::object();
    for (const engine::TokenLogprob& alt : e.top_logprobs) {
      alts[std::string(tok.PieceBytes(prev, alt.token))] = alt.logprob;
    }
    top.push_back(std::move(alts));
    offsets.push_back(text_offset);
    text_offset += piece.size();
    prev = e.token;
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(offsets)}};
}

Json UsageJson(const engine::Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details",
           {{"cached_tokens", usage.cached_tokens + usage.cached_tokens_remote}}},
          // OpenAI's names for speculative (predicted-output) tokens.
          {"completion_tokens_details",
           {{"accepted_prediction_tokens", usage.draft_tokens_accepted},
            {"rejected_prediction_tokens", usage.draft_tokens - usage.draft_tokens_accepted}}}};
}

Json Envelope(const ResponseContext& ctx, bool chunk) {
  const bool chat = ctx.kind == ApiKind::kChatCompletions;
  return {
      {"id", ctx.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", ctx.created},
      {"model", ctx.model},
      {"system_fingerprint", ctx.system_fingerprint}};
}

std::string Event(const Json& json) { return absl::StrCat("data: ", Dump(json), "\n\n"); }

// A kvserve.v1 field path (service/request_convert.h) as the OpenAI parameter it came
// from; OpenAI names pass unchanged.
std::string OpenAiParam(absl::string_view path, ApiKind kind) {
  const char* prompt = kind == ApiKind::kChatCompletions ? "messages" : "prompt";
  if (absl::ConsumePrefix(&path, "sampling.")) return std::string(path);
  // ConvertMessages' "messages.messages[i].role".
  if (absl::ConsumePrefix(&path, "messages.")) return std::string(path);
  if (absl::StartsWith(path, "prompt.tokens.ids")) {
    return absl::StrCat("prompt", path.substr(absl::string_view("prompt.tokens.ids").size()));
  }
  if (absl::StartsWith(path, "prompt")) return prompt;
  return std::string(path);
}

// The field of an INVALID_ARGUMENT without a FieldError payload: the first word of its
// message when it is a request path (the service's own wire-limit errors read
// "prompt.text is ... bytes").
std::optional<std::string> LeadingPath(absl::string_view message) {
  const absl::string_view word = message.substr(0, message.find(' '));
  for (absl::string_view known :
       {"prompt", "session_id", "max_tokens", "stop", "top_logprobs", "cache_salt", "sampling."}) {
    if (absl::StartsWith(word, known)) return std::string(word);
  }
  return std::nullopt;
}

}  // namespace

std::string CompletionBody(const ResponseContext& ctx, std::span<const ChoiceOutput> choices,
                           const engine::Usage& usage) {
  Json json = Envelope(ctx, /*chunk=*/false);
  Json list = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    Json choice = {{"index", i},
                   {"logprobs", ctx.logprobs ? LogprobsJson(ctx, c, 0) : Json()},
                   {"finish_reason", c.finish.has_value() ? FinishReasonName(*c.finish) : "stop"}};
    if (ctx.kind == ApiKind::kChatCompletions) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    list.push_back(std::move(choice));
  }
  json["choices"] = std::move(list);
  json["usage"] = UsageJson(usage);
  return Dump(json);
}

std::string StreamChunk(const ResponseContext& ctx, int32_t index, const ChoiceOutput& out,
                        bool first) {
  // One event of choice `index` with `fields` (delta or text, logprobs, finish_reason).
  auto event = [&](Json choice) {
    Json json = Envelope(ctx, /*chunk=*/true);
    choice["index"] = index;
    if (!choice.contains("logprobs")) choice["logprobs"] = nullptr;
    if (!choice.contains("finish_reason")) choice["finish_reason"] = nullptr;
    json["choices"] = Json::array({std::move(choice)});
    if (ctx.include_usage) json["usage"] = nullptr;
    return Event(json);
  };
  const bool has_output = !out.text.empty() || !out.tokens.empty();
  const Json logprobs = ctx.logprobs && has_output ? LogprobsJson(ctx, out, 0) : Json();
  if (ctx.kind == ApiKind::kCompletions) {
    if (!has_output && !out.finish.has_value()) return "";
    Json choice = {{"text", out.text}, {"logprobs", logprobs}};
    if (out.finish.has_value()) choice["finish_reason"] = FinishReasonName(*out.finish);
    return event(std::move(choice));
  }
  // Chat, as OpenAI streams it: the role alone first, then content deltas, then an empty
  // delta with the finish reason.
  std::string events;
  if (first) events += event({{"delta", {{"role", "assistant"}, {"content", ""}}}});
  if (has_output) events += event({{"delta", {{"content", out.text}}}, {"logprobs", logprobs}});
  if (out.finish.has_value()) {
    events += event({{"delta", Json::object()}, {"finish_reason", FinishReasonName(*out.finish)}});
  }
  return events;
}

std::string StreamUsageChunk(const ResponseContext& ctx, const engine::Usage& usage) {
  Json json = Envelope(ctx, /*chunk=*/true);
  json["choices"] = Json::array();
  json["usage"] = UsageJson(usage);
  return Event(json);
}

namespace {

Json ModelJson(const std::string& id, int64_t created) {
  return {{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "kvserve"}};
}

}  // namespace

std::string ModelBody(const std::string& id, int64_t created) {
  return Dump(ModelJson(id, created));
}

std::string ModelListBody(const std::string& id, int64_t created) {
  return Dump({{"object", "list"}, {"data", Json::array({ModelJson(id, created)})}});
}

HttpError MakeHttpError(int status, const std::string& message, const std::string& code,
                        const std::string& param) {
  const char* type = status == 429   ? "rate_limit_exceeded"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  Json error = {{"message", message},
                {"type", type},
                {"param", param.empty() ? Json() : Json(param)},
                {"code", code.empty() ? Json() : Json(code)}};
  return {status, Dump({{"error", std::move(error)}}), status == 429 || status == 503};
}

HttpError ToHttpError(const absl::Status& status, ApiKind kind) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition: {
      std::optional<std::string> field = engine::ErrorField(status);
      if (!field.has_value()) field = LeadingPath(message);
      std::string code = "invalid_value";
      if (absl::StartsWith(message, "the request body is not valid JSON")) code = "invalid_json";
      if (absl::EndsWith(message, " is required")) code = "missing_required_parameter";
      return MakeHttpError(400, message, code, field.has_value() ? OpenAiParam(*field, kind) : "");
    }
    case absl::StatusCode::kUnauthenticated:
      return MakeHttpError(401, message, "invalid_api_key");
    case absl::StatusCode::kPermissionDenied:
      return MakeHttpError(403, message, "permission_denied");
    case absl::StatusCode::kNotFound:
      // The one thing a generation can name that is not there: its session.
      return MakeHttpError(404, message, "not_found",
                           absl::StrContains(message, "session") ? "session_id" : "");
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kAlreadyExists:
      return MakeHttpError(409, message, "conflict");
    case absl::StatusCode::kResourceExhausted:
      return MakeHttpError(429, message, "rate_limit_exceeded");
    case absl::StatusCode::kUnavailable:
      return MakeHttpError(503, message, "service_unavailable");
    case absl::StatusCode::kDeadlineExceeded:
      return MakeHttpError(504, message, "timeout");
    case absl::StatusCode::kUnimplemented:
      return MakeHttpError(501, message, "not_implemented");
    case absl::StatusCode::kCancelled:
      return MakeHttpError(499, message, "cancelled");
    default:
      return MakeHttpError(500, message, "internal_error");
  }
}

std::string StreamErrorEvent(const HttpError& error) {
  return absl::StrCat("data: ", error.body, "\n\n");
}

}  // namespace kvserve::service
