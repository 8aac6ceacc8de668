#include "client/openai_stream.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace kvserve::client::bench {
namespace {

using Json = nlohmann::json;

// The prompt of `request` as the endpoint's field ("messages" or "prompt").
absl::Status SetPrompt(const v1::GenerateRequest& request, HttpEndpoint endpoint, Json* body) {
  const bool chat = endpoint == HttpEndpoint::kChat;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText:
      if (chat) {
        (*body)["messages"] = Json::array({{{"role", "user"}, {"content", request.text()}}});
      } else {
        (*body)["prompt"] = request.text();
      }
      return absl::OkStatus();
    case v1::GenerateRequest::kTokens:
      if (chat) {
        return absl::InvalidArgumentError(
            "tokens: a token-id prompt needs the completions endpoint");
      }
      (*body)["prompt"] =
          std::vector<int32_t>(request.tokens().ids().begin(), request.tokens().ids().end());
      return absl::OkStatus();
    case v1::GenerateRequest::kMessages: {
      if (!chat)
        return absl::InvalidArgumentError("messages: chat messages need the chat endpoint");
      Json messages = Json::array();
      for (const v1::Message& m : request.messages().messages()) {
        messages.push_back({{"role", m.role()}, {"content", m.content()}});
      }
      (*body)["messages"] = std::move(messages);
      return absl::OkStatus();
    }
    case v1::GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("prompt: the request has none");
}

void SetSampling(const v1::SamplingParams& s, Json* body) {
  if (s.has_temperature()) (*body)["temperature"] = s.temperature();
  if (s.has_top_p()) (*body)["top_p"] = s.top_p();
  if (s.has_seed()) (*body)["seed"] = s.seed();
  if (s.presence_penalty() != 0) (*body)["presence_penalty"] = s.presence_penalty();
  if (s.frequency_penalty() != 0) (*body)["frequency_penalty"] = s.frequency_penalty();
  // kvserve's extension fields.
  if (s.top_k() != 0) (*body)["top_k"] = s.top_k();
  if (s.min_p() != 0) (*body)["min_p"] = s.min_p();
  if (s.has_repetition_penalty()) (*body)["repetition_penalty"] = s.repetition_penalty();
}

// A string field of `object` ("" when absent or not a string).
std::string StringField(const Json& object, const char* key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// An integer field of `object` (0 when absent or not an integer).
int64_t IntField(const Json& object, const char* key) {
  if (!object.is_object()) return 0;
  const auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

absl::StatusCode CodeOfErrorObject(const Json& error) {
  const std::string code = StringField(error, "code");
  if (code == "rate_limit_exceeded") return absl::StatusCode::kResourceExhausted;
  if (code == "service_unavailable") return absl::StatusCode::kUnavailable;
  if (code == "timeout") return absl::StatusCode::kDeadlineExceeded;
  if (code == "internal_error") return absl::StatusCode::kInternal;
  if (StringField(error, "type") == "invalid_request_error") {
    return absl::StatusCode::kInvalidArgument;
  }
  return absl::StatusCode::kUnknown;
}

absl::StatusCode CodeOfHttpStatus(int status) {
  switch (status) {
    case 400:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
    case 501:
      return absl::StatusCode::kUnimplemented;
    case 408:
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    case 413:
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 499:
      return absl::StatusCode::kCancelled;
    case 500:
      return absl::StatusCode::kInternal;
    case 502:
    case 503:
      return absl::StatusCode::kUnavailable;
    default:
      return status >= 400 && status < 500 ? absl::StatusCode::kFailedPrecondition
                                           : absl::StatusCode::kUnknown;
  }
}

absl::Status Malformed(std::string_view data) {
  return absl::InternalError(
      absl::StrCat("malformed stream chunk: ", std::string(data.substr(0, 200))));
}

}  // namespace

absl::StatusOr<HttpEndpoint> ParseHttpEndpoint(std::string_view name) {
  if (name == "chat") return HttpEndpoint::kChat;
  if (name == "completions") return HttpEndpoint::kCompletions;
  return absl::InvalidArgumentError(
      absl::StrCat("--http-endpoint must be chat or completions, not \"", std::string(name), "\""));
}

std::string_view HttpEndpointPath(HttpEndpoint endpoint) {
  return endpoint == HttpEndpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
}

absl::StatusOr<std::string> StreamRequestBody(const v1::GenerateRequest& request,
                                              HttpEndpoint endpoint, std::string_view model) {
  if (request.parse_special()) {
    return absl::InvalidArgumentError("parse_special: the HTTP API has no such field");
  }
  Json body = {{"model", model}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  if (absl::Status s = SetPrompt(request, endpoint, &body); !s.ok()) return s;
  if (request.has_max_tokens()) body["max_tokens"] = request.max_tokens();
  SetSampling(request.sampling(), &body);
  if (request.stop_size() > 0)
    body["stop"] = std::vector<std::string>(request.stop().begin(), request.stop().end());
  if (request.top_logprobs() > 0) {
    if (endpoint == HttpEndpoint::kChat) {
      body["logprobs"] = true;
      body["top_logprobs"] = request.top_logprobs();
    } else {
      body["logprobs"] = request.top_logprobs();
    }
  }
  // kvserve's extension fields.
  if (request.stop_token_ids_size() > 0) {
    body["stop_token_ids"] =
        std::vector<int32_t>(request.stop_token_ids().begin(), request.stop_token_ids().end());
  }
  if (request.ignore_eos()) body["ignore_eos"] = true;
  if (!request.cache_salt().empty()) body["cache_salt"] = request.cache_salt();
  if (!request.session_id().empty()) body["session_id"] = request.session_id();
  return body.dump();
}

absl::StatusOr<std::optional<StreamPiece>> ParseStreamData(std::string_view data,
                                                           HttpEndpoint endpoint) {
  if (data == "[DONE]") return std::nullopt;
  const Json chunk = Json::parse(data, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (!chunk.is_object()) return Malformed(data);
  if (const auto error = chunk.find("error"); error != chunk.end()) {
    return absl::Status(CodeOfErrorObject(*error), StringField(*error, "message"));
  }
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array()) return Malformed(data);
  StreamPiece piece;
  if (!choices->empty()) {
    const Json& choice = choices->front();
    piece.text =
        endpoint == HttpEndpoint::kChat
            ? StringField(choice.is_object() ? choice.value("delta", Json()) : Json(), "content")
            : StringField(choice, "text");
    piece.tokens = piece.text.empty() ? 0 : 1;
  }
  if (const auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
    v1::Usage& u = piece.usage.emplace();
    u.set_prompt_tokens(static_cast<int32_t>(IntField(*usage, "prompt_tokens")));
    u.set_completion_tokens(static_cast<int32_t>(IntField(*usage, "completion_tokens")));
    const auto details = usage->find("prompt_tokens_details");
    if (details != usage->end()) {
      u.set_cached_tokens_local(static_cast<int32_t>(IntField(*details, "cached_tokens")));
    }
    const auto completion = usage->find("completion_tokens_details");
    if (completion != usage->end()) {
      const int64_t accepted = IntField(*completion, "accepted_prediction_tokens");
      u.set_draft_tokens_accepted(static_cast<int32_t>(accepted));
      u.set_draft_tokens(
          static_cast<int32_t>(accepted + IntField(*completion, "rejected_prediction_tokens")));
    }
  }
  return piece;
}

absl::StatusOr<std::string> FirstModelId(std::string_view body) {
  const Json json = Json::parse(body, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("data") || !json["data"].is_array()) {
    return absl::InternalError(
        absl::StrCat("GET /v1/models: not a model list: ", std::string(body.substr(0, 200))));
  }
  const Json& data = json["data"];
  if (data.empty()) return absl::FailedPreconditionError("GET /v1/models: no model served");
  const std::string id = StringField(data.front(), "id");
  if (id.empty()) return absl::InternalError("GET /v1/models: the first model has no id");
  return id;
}

absl::Status HttpErrorStatus(int http_status, std::string_view body) {
  const Json json = Json::parse(body, /*cb=*/nullptr, /*allow_exceptions=*/false);
  std::string message;
  if (json.is_object() && json.contains("error")) message = StringField(json["error"], "message");
  if (message.empty()) message = std::string(body.substr(0, 200));
  return absl::Status(CodeOfHttpStatus(http_status),
                      absl::StrCat("HTTP ", http_status, ": ", message));
}

}  // namespace kvserve::client::bench
