// ParseOpenAiRequest: what each OpenAI field becomes in kvserve.v1.GenerateRequest, and
// the error (field and reason) of every kind of bad body.
#include "service/openai_request.h"

#include <string>

#include "engine/field_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::service {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<OpenAiRequest> Chat(const std::string& body) {
  return ParseOpenAiRequest(ApiKind::kChatCompletions, body, OpenAiLimits());
}
absl::StatusOr<OpenAiRequest> Completion(const std::string& body) {
  return ParseOpenAiRequest(ApiKind::kCompletions, body, OpenAiLimits());
}
// The field a bad body is reported against ("" for malformed JSON).
std::string Field(const absl::StatusOr<OpenAiRequest>& r) {
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  return engine::ErrorField(r.status()).value_or("");
}

TEST(OpenAiRequestTest, ChatFieldsMapOntoTheGenerateRequest) {
  auto r = Chat(R"({"model": "m", "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": ""}],
    "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": -1, "stop": "END",
    "presence_penalty": 0.25, "frequency_penalty": 0.5, "logprobs": true, "top_logprobs": 3,
    "n": 2, "user": "u", "stream": true, "stream_options": {"include_usage": true},
    "top_k": 40, "min_p": 0.05, "ignore_eos": true, "cache_salt": "s", "session_id": "sid",
    "stop_token_ids": [2, 3], "max_draft_tokens": 2, "some_future_field": {"x": 1}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  const v1::GenerateRequest& g = r->generate;
  ASSERT_EQ(g.messages().messages_size(), 3);
  EXPECT_EQ(g.messages().messages(0).role(), "system");
  EXPECT_EQ(g.messages().messages(1).content(), "Hi there");
  EXPECT_EQ(g.messages().messages(2).content(), "");
  EXPECT_EQ(g.max_tokens(), 7);
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().seed(), ~uint64_t{0});  // the same 64 bits
  EXPECT_EQ(g.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(g.sampling().min_p(), 0.05f);
  EXPECT_FLOAT_EQ(g.sampling().presence_penalty(), 0.25f);
  EXPECT_FLOAT_EQ(g.sampling().frequency_penalty(), 0.5f);
  ASSERT_EQ(g.stop_size(), 1);
  EXPECT_EQ(g.stop(0), "END");
  EXPECT_EQ(g.top_logprobs(), 3);
  EXPECT_TRUE(g.ignore_eos());
  EXPECT_EQ(g.cache_salt(), "s");
  EXPECT_EQ(g.session_id(), "sid");
  EXPECT_EQ(g.stop_token_ids_size(), 2);
  EXPECT_EQ(g.max_draft_tokens(), 2);
  EXPECT_EQ(r->n, 2);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->logprobs);
}

TEST(OpenAiRequestTest, UnsetFieldsStayUnsetAndNullIsAbsent) {
  auto r = Chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                    "temperature": null, "stop": null, "n": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->generate.sampling().has_temperature());
  EXPECT_FALSE(r->generate.has_max_tokens());
  EXPECT_EQ(r->n, 1);
  EXPECT_FALSE(r->stream);
}

TEST(OpenAiRequestTest, CompletionPrompts) {
  auto text = Completion(R"({"model": "m", "prompt": ["Once"], "echo": true, "logprobs": 0})");
  EXPECT_FALSE(text.ok());  // echo with logprobs: prompt logprobs are not computed
  EXPECT_EQ(Field(text), "echo");
  text = Completion(R"({"model": "m", "prompt": ["Once"], "echo": true})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->generate.text(), "Once");
  EXPECT_TRUE(text->echo);
  auto ids = Completion(R"({"model": "m", "prompt": [1, 2, 3], "logprobs": 2})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->generate.tokens().ids_size(), 3);
  EXPECT_TRUE(ids->logprobs);
  EXPECT_EQ(ids->generate.top_logprobs(), 2);
  auto nested = Completion(R"({"model": "m", "prompt": [[5, 6]]})");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->generate.tokens().ids_size(), 2);
  EXPECT_EQ(Field(Completion(R"({"model": "m", "prompt": ["a", "b"]})")), "prompt");
  EXPECT_EQ(Field(Completion(R"({"model": "m", "prompt": [1, -2]})")), "prompt[1]");
  EXPECT_EQ(Field(Completion(R"({"model": "m", "prompt": "x", "suffix": "y"})")), "suffix");
  EXPECT_EQ(Field(Completion(R"({"model": "m", "prompt": "x", "best_of": 3})")), "best_of");
  EXPECT_EQ(Field(Completion(R"({"model": "m"})")), "prompt");
}

TEST(OpenAiRequestTest, EveryBadFieldIsNamed) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  auto chat = [&](const std::string& extra) {
    return Chat(absl::StrCat(R"({"model": "m", )", msgs, ", ", extra, "}"));
  };
  EXPECT_EQ(Field(chat(R"("temperature": "hot")")), "temperature");
  EXPECT_EQ(Field(chat(R"("temperature": 1e300)")), "temperature");
  EXPECT_EQ(Field(chat(R"("temperature": 1e999)")), "");  // not a double: malformed JSON
  EXPECT_EQ(Field(chat(R"("max_tokens": 0)")), "max_tokens");
  EXPECT_EQ(Field(chat(R"("max_tokens": 99999999999999999999)")), "max_tokens");
  EXPECT_EQ(Field(chat(R"("max_tokens": 1.5)")), "max_tokens");
  EXPECT_EQ(Field(chat(R"("n": 9)")), "n");
  EXPECT_EQ(Field(chat(R"("seed": "7")")), "seed");
  EXPECT_EQ(Field(chat(R"("stop": [1])")), "stop[0]");
  EXPECT_EQ(Field(chat(R"("stream": 1)")), "stream");
  EXPECT_EQ(Field(chat(R"("stream_options": {"include_usage": "yes"})")),
            "stream_options.include_usage");
  EXPECT_EQ(Field(chat(R"("top_logprobs": 2)")), "top_logprobs");  // without logprobs
  EXPECT_EQ(Field(chat(R"("logprobs": true, "top_logprobs": 21)")), "top_logprobs");
  EXPECT_EQ(Field(chat(R"("tools": [{"type": "function"}])")), "tools");
  EXPECT_EQ(Field(chat(R"("response_format": {"type": "json_object"})")), "response_format");
  EXPECT_EQ(Field(chat(R"("stop_token_ids": [-1])")), "stop_token_ids[0]");
  EXPECT_EQ(Field(chat(R"("max_draft_tokens": 65)")), "max_draft_tokens");
  EXPECT_EQ(Field(Chat(R"({"messages": [{"role": "user", "content": "x"}]})")), "model");
  EXPECT_EQ(Field(Chat(R"({"model": "m", "messages": []})")), "messages");
  EXPECT_EQ(Field(Chat(R"({"model": "m", "messages": [{"role": "tool", "content": "x"}]})")),
            "messages[0].role");
  EXPECT_EQ(Field(Chat(R"({"model": "m", "messages": [{"role": "user", "content": 5}]})")),
            "messages[0].content");
  EXPECT_EQ(Field(Chat(R"({"model": "m", "messages": [{"role": "user"}]})")),
            "messages[0].content");
  EXPECT_EQ(
      Field(Chat(
          R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})")),
      "messages[0].content[0].type");
}

TEST(OpenAiRequestTest, MalformedBodiesAreRefusedWithoutAField) {
  for (const std::string body :
       {"", "{", "[1, 2]", "{\"model\": \"m\",}", "nul", "\"x\"", "{\"model\": \"\xff\"}"}) {
    auto r = Chat(body);
    EXPECT_EQ(Field(r), "") << body;
    EXPECT_THAT(r.status().message(), HasSubstr("not valid JSON")) << body;
  }
  // Nesting is bounded before parsing (a megabyte of '[' costs one scan).
  const std::string deep(1 << 20, '[');
  auto r = Chat(deep);
  EXPECT_THAT(r.status().message(), HasSubstr("nested deeper than 64"));
  // Brackets inside strings do not count.
  auto fine = Chat(absl::StrCat(R"({"model": "m", "messages": [{"role": "user", "content": ")",
                                std::string(1000, '['), R"("}]})"));
  EXPECT_TRUE(fine.ok()) << fine.status();
}

}  // namespace
}  // namespace kvserve::service
