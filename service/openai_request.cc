#include "service/openai_request.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/field_error.h"
#include "engine/sampling_params.h"
#include "nlohmann/json.hpp"

namespace kvserve::service {
namespace {

using Json = nlohmann::json;

// INVALID_ARGUMENT for malformed JSON (no field).
absl::Status BadJson(absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat("the request body is not valid JSON: ", reason));
}

// Rejects nesting deeper than `max_depth` before the parser sees it (a body of a
// million '[' costs a scan, not a million nested values).
absl::Status CheckNesting(absl::string_view body, int32_t max_depth) {
  int32_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return BadJson(absl::StrCat("nested deeper than ", max_depth, " levels"));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

// Typed readers of one member of a JSON object: absent or null leaves the output
// unset; a wrong type or range is a FieldError naming `key`.
class Reader {
 public:
  explicit Reader(const Json& object) : object_(object) {}

  const Json* Find(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  absl::Status Bool(const char* key, bool* out) const {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) return engine::FieldError(key, "must be a boolean");
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  absl::Status Int(const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) const {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    return IntValue(*v, key, lo, hi, out);
  }

  static absl::Status IntValue(const Json& v, const std::string& name, int64_t lo, int64_t hi,
                               std::optional<int64_t>* out) {
    if (!v.is_number_integer()) return engine::FieldError(name, "must be an integer");
    int64_t value;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) {
        return engine::FieldError(name, absl::StrCat("must be in [", lo, ", ", hi, "]"));
      }
      value = static_cast<int64_t>(u);
    } else {
      value = v.get<int64_t>();
    }
    if (value < lo || value > hi) {
      return engine::FieldError(name, absl::StrCat("must be in [", lo, ", ", hi, "]"));
    }
    *out = value;
    return absl::OkStatus();
  }

  absl::Status Number(const char* key, std::optional<float>* out) const {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number()) return engine::FieldError(key, "must be a number");
    const double d = v->get<double>();
    if (!std::isfinite(d) || std::fabs(d) > 1e6) {
      return engine::FieldError(key, "must be a finite number of magnitude <= 1e6");
    }
    *out = static_cast<float>(d);
    return absl::OkStatus();
  }

  absl::Status String(const char* key, std::optional<std::string>* out) const {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_string()) return engine::FieldError(key, "must be a string");
    *out = v->get<std::string>();
    return absl::OkStatus();
  }

 private:
  const Json& object_;
};

#define KVSERVE_RETURN_IF_ERROR(expr)         \
  do {                                        \
    if (absl::Status _s = (expr); !_s.ok()) { \
      return _s;                              \
    }                                         \
  } while (false)

// messages[i].content: a string, or text parts ({"type": "text", "text": ...}) joined.
absl::StatusOr<std::string> MessageContent(const Json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return engine::FieldError(field, "must be a string or an array of text parts");
  }
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string part_field = absl::StrCat(field, "[", j, "]");
    if (!part.is_object()) return engine::FieldError(part_field, "must be an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || type->get<std::string>() != "text") {
      return engine::FieldError(absl::StrCat(part_field, ".type"),
                                "must be \"text\" (only text content is supported)");
    }
    auto part_text = part.find("text");
    if (part_text == part.end() || !part_text->is_string()) {
      return engine::FieldError(absl::StrCat(part_field, ".text"), "must be a string");
    }
    text += part_text->get<std::string>();
  }
  return text;
}

absl::Status ReadMessages(const Json& body, v1::Conversation* out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return engine::FieldError("messages", "is required");
  if (!it->is_array() || it->empty()) {
    return engine::FieldError("messages", "must be a non-empty array");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return engine::FieldError(field, "must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return engine::FieldError(absl::StrCat(field, ".role"), "must be a string");
    }
    std::string role_name = role->get<std::string>();
    if (role_name == "developer") role_name = "system";  // OpenAI's newer name for it
    if (role_name != "system" && role_name != "user" && role_name != "assistant") {
      return engine::FieldError(absl::StrCat(field, ".role"),
                                "must be system, developer, user or assistant");
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      return engine::FieldError(absl::StrCat(field, ".content"), "is required");
    }
    absl::StatusOr<std::string> text = MessageContent(*content, absl::StrCat(field, ".content"));
    if (!text.ok()) return text.status();
    v1::Message* message = out->add_messages();
    message->set_role(std::move(role_name));
    message->set_content(*std::move(text));
  }
  return absl::OkStatus();
}

// /v1/completions' prompt: a string, a list of one string, token ids, or a list of one
// list of token ids.
absl::Status ReadPrompt(const Json& body, v1::GenerateRequest* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return engine::FieldError("prompt", "is required");
  const Json* prompt = &*it;
  if (prompt->is_array() && prompt->size() == 1 && !(*prompt)[0].is_number()) {
    prompt = &(*prompt)[0];
  }
  if (prompt->is_string()) {
    out->set_text(prompt->get<std::string>());
    return absl::OkStatus();
  }
  if (prompt->is_array() && !prompt->empty() && !(*prompt)[0].is_string()) {
    for (size_t i = 0; i < prompt->size(); ++i) {
      std::optional<int64_t> id;
      KVSERVE_RETURN_IF_ERROR(Reader::IntValue((*prompt)[i], absl::StrCat("prompt[", i, "]"), 0,
                                               std::numeric_limits<int32_t>::max(), &id));
      out->mutable_tokens()->add_ids(static_cast<int32_t>(*id));
    }
    return absl::OkStatus();
  }
  return engine::FieldError("prompt",
                            "must be a string or token ids (one prompt a request; batch "
                            "prompts by sending several requests)");
}

absl::Status ReadStop(const Reader& r, v1::GenerateRequest* out) {
  const Json* stop = r.Find("stop");
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    out->add_stop(stop->get<std::string>());
    return absl::OkStatus();
  }
  if (!stop->is_array()) return engine::FieldError("stop", "must be a string or a list of strings");
  for (size_t i = 0; i < stop->size(); ++i) {
    if (!(*stop)[i].is_string()) {
      return engine::FieldError(absl::StrCat("stop[", i, "]"), "must be a string");
    }
    out->add_stop((*stop)[i].get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ReadSampling(const Reader& r, v1::SamplingParams* s) {
  std::optional<float> value;
  KVSERVE_RETURN_IF_ERROR(r.Number("temperature", &value));
  if (value.has_value()) s->set_temperature(*std::exchange(value, std::nullopt));
  KVSERVE_RETURN_IF_ERROR(r.Number("top_p", &value));
  if (value.has_value()) s->set_top_p(*std::exchange(value, std::nullopt));
  KVSERVE_RETURN_IF_ERROR(r.Number("min_p", &value));
  if (value.has_value()) s->set_min_p(*std::exchange(value, std::nullopt));
  KVSERVE_RETURN_IF_ERROR(r.Number("repetition_penalty", &value));
  if (value.has_value()) s->set_repetition_penalty(*std::exchange(value, std::nullopt));
  KVSERVE_RETURN_IF_ERROR(r.Number("frequency_penalty", &value));
  if (value.has_value()) s->set_frequency_penalty(*std::exchange(value, std::nullopt));
  KVSERVE_RETURN_IF_ERROR(r.Number("presence_penalty", &value));
  if (value.has_value()) s->set_presence_penalty(*std::exchange(value, std::nullopt));
  std::optional<int64_t> top_k;
  KVSERVE_RETURN_IF_ERROR(r.Int("top_k", 0, std::numeric_limits<int32_t>::max(), &top_k));
  if (top_k.has_value()) s->set_top_k(static_cast<int32_t>(*top_k));
  std::optional<int64_t> seed;
  KVSERVE_RETURN_IF_ERROR(r.Int("seed", std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max(), &seed));
  // OpenAI's seed is a signed 64-bit integer; kvserve's is unsigned: the same bits.
  if (seed.has_value()) s->set_seed(static_cast<uint64_t>(*seed));
  return absl::OkStatus();
}

// The fields both endpoints share.
absl::Status ReadCommon(const Reader& r, const OpenAiLimits& limits, OpenAiRequest* out) {
  std::optional<std::string> model;
  KVSERVE_RETURN_IF_ERROR(r.String("model", &model));
  if (!model.has_value()) return engine::FieldError("model", "is required");
  out->model = *std::move(model);
  v1::GenerateRequest& g = out->generate;
  KVSERVE_RETURN_IF_ERROR(ReadSampling(r, g.mutable_sampling()));
  // max_completion_tokens is the chat API's newer name; either may come.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    std::optional<int64_t> max_tokens;
    KVSERVE_RETURN_IF_ERROR(r.Int(key, 1, std::numeric_limits<int32_t>::max(), &max_tokens));
    if (max_tokens.has_value()) g.set_max_tokens(static_cast<int32_t>(*max_tokens));
  }
  KVSERVE_RETURN_IF_ERROR(ReadStop(r, &g));
  std::optional<int64_t> n;
  KVSERVE_RETURN_IF_ERROR(r.Int("n", 1, limits.max_n, &n));
  out->n = static_cast<int32_t>(n.value_or(1));
  KVSERVE_RETURN_IF_ERROR(r.Bool("stream", &out->stream));
  if (const Json* options = r.Find("stream_options"); options != nullptr) {
    if (!options->is_object()) return engine::FieldError("stream_options", "must be an object");
    Reader o(*options);
    absl::Status s = o.Bool("include_usage", &out->include_usage);
    if (!s.ok()) return engine::NestField("stream_options", s);
  }
  std::optional<std::string> user;
  KVSERVE_RETURN_IF_ERROR(r.String("user", &user));  // accepted, not used

  // kvserve's extensions.
  bool flag = false;
  KVSERVE_RETURN_IF_ERROR(r.Bool("ignore_eos", &flag));
  g.set_ignore_eos(std::exchange(flag, false));
  KVSERVE_RETURN_IF_ERROR(r.Bool("parse_special", &flag));
  g.set_parse_special(flag);
  std::optional<std::string> text;
  KVSERVE_RETURN_IF_ERROR(r.String("cache_salt", &text));
  if (text.has_value()) g.set_cache_salt(*std::exchange(text, std::nullopt));
  KVSERVE_RETURN_IF_ERROR(r.String("session_id", &text));
  if (text.has_value()) g.set_session_id(*std::exchange(text, std::nullopt));
  std::optional<int64_t> drafts;
  KVSERVE_RETURN_IF_ERROR(r.Int("max_draft_tokens", 0, engine::kMaxDraftTokens, &drafts));
  if (drafts.has_value()) g.set_max_draft_tokens(static_cast<int32_t>(*drafts));
  if (const Json* ids = r.Find("stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return engine::FieldError("stop_token_ids", "must be a list of integers");
    for (size_t i = 0; i < ids->size(); ++i) {
      std::optional<int64_t> id;
      KVSERVE_RETURN_IF_ERROR(Reader::IntValue((*ids)[i], absl::StrCat("stop_token_ids[", i, "]"),
                                               0, std::numeric_limits<int32_t>::max(), &id));
      g.add_stop_token_ids(static_cast<int32_t>(*id));
    }
  }
  // What kvserve cannot do is refused, not ignored.
  for (const char* key : {"tools", "functions", "suffix"}) {
    const Json* v = r.Find(key);
    if (v != nullptr && !(v->is_array() && v->empty()) && !(v->is_string() && v->empty())) {
      return engine::FieldError(key, "is not supported by this server");
    }
  }
  if (const Json* format = r.Find("response_format"); format != nullptr) {
    auto type = format->is_object() ? format->find("type") : format->end();
    if (!format->is_object() || type == format->end() || *type != "text") {
      return engine::FieldError("response_format", "only {\"type\": \"text\"} is supported");
    }
  }
  return absl::OkStatus();
}

absl::Status ReadLogprobs(const Reader& r, OpenAiRequest* out) {
  std::optional<int64_t> top;
  if (out->kind == ApiKind::kChatCompletions) {
    KVSERVE_RETURN_IF_ERROR(r.Bool("logprobs", &out->logprobs));
    KVSERVE_RETURN_IF_ERROR(r.Int("top_logprobs", 0, 20, &top));
    if (top.has_value() && *top > 0 && !out->logprobs) {
      return engine::FieldError("top_logprobs", "needs logprobs: true");
    }
  } else {
    // Completions: logprobs is the number of alternatives (0: the sampled token only).
    KVSERVE_RETURN_IF_ERROR(r.Int("logprobs", 0, 20, &top));
    out->logprobs = top.has_value();
    KVSERVE_RETURN_IF_ERROR(r.Bool("echo", &out->echo));
    if (out->echo && out->logprobs) {
      return engine::FieldError("echo",
                                "cannot be combined with logprobs (prompt logprobs are "
                                "not computed)");
    }
    std::optional<int64_t> best_of;
    KVSERVE_RETURN_IF_ERROR(r.Int("best_of", 1, 1, &best_of));
  }
  out->generate.set_top_logprobs(static_cast<int32_t>(top.value_or(0)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(ApiKind kind, absl::string_view body,
                                                 const OpenAiLimits& limits) {
  KVSERVE_RETURN_IF_ERROR(CheckNesting(body, limits.max_depth));
  Json json = Json::parse(body, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return BadJson("syntax error or invalid UTF-8");
  if (!json.is_object()) return BadJson("the body must be a JSON object");
  OpenAiRequest out;
  out.kind = kind;
  const Reader r(json);
  KVSERVE_RETURN_IF_ERROR(ReadCommon(r, limits, &out));
  KVSERVE_RETURN_IF_ERROR(ReadLogprobs(r, &out));
  if (kind == ApiKind::kChatCompletions) {
    KVSERVE_RETURN_IF_ERROR(ReadMessages(json, out.generate.mutable_messages()));
  } else {
    KVSERVE_RETURN_IF_ERROR(ReadPrompt(json, &out.generate));
  }
  return out;
}

}  // namespace kvserve::service
