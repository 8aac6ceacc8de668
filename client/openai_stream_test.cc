// The load generator's HTTP side without a server: the event-stream parser, the request
// bodies of both endpoints, the stream chunks, and error answers as statuses.
#include "client/openai_stream.h"

#include <optional>
#include <string>
#include <vector>

#include "client/sse_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvserve::client::bench {
namespace {

using ::nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The events of `stream` fed in pieces of `piece_bytes`.
std::vector<std::string> Events(std::string_view stream, size_t piece_bytes) {
  SseParser parser;
  std::vector<std::string> events;
  for (size_t i = 0; i < stream.size(); i += piece_bytes) {
    EXPECT_TRUE(parser.Feed(stream.substr(i, piece_bytes), &events).ok());
  }
  return events;
}

TEST(SseParserTest, EventsWhateverTheFeedSizes) {
  const std::string stream =
      ": ping\n\n"
      "data: {\"a\":1}\n\n"
      "event: message\r\nid: 7\r\ndata:{\"b\":2}\r\n\r\n"
      "data: one\rdata: two\r\r"
      "retry: 10\n\n"  // an event without data: nothing
      "data: [DONE]\n\n"
      "data: unfinished";
  for (size_t piece : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, stream.size()}) {
    SCOPED_TRACE(piece);
    EXPECT_THAT(Events(stream, piece), ElementsAre("{\"a\":1}", "{\"b\":2}", "one\ntwo", "[DONE]"));
  }
}

TEST(SseParserTest, KeepsInnerSpacesAndEmptyData) {
  EXPECT_THAT(Events("data:  two spaces\n\ndata\n\ndata:\n\n", 4),
              ElementsAre(" two spaces", "", ""));
}

TEST(SseParserTest, AnEventOverTheLimitFails) {
  SseParser parser(/*max_event_bytes=*/16);
  std::vector<std::string> events;
  EXPECT_TRUE(parser.Feed("data: 0123456789\n\n", &events).ok());
  EXPECT_THAT(events, ElementsAre("0123456789"));
  EXPECT_TRUE(parser.Feed("data: 0123456789\ndata: ", &events).ok());
  EXPECT_EQ(parser.Feed("0123456789", &events).code(), absl::StatusCode::kResourceExhausted);
}

v1::GenerateRequest Request() {
  v1::GenerateRequest r;
  r.set_max_tokens(32);
  r.set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0.0f);
  r.mutable_sampling()->set_top_p(0.5f);
  return r;
}

json Body(const v1::GenerateRequest& request, HttpEndpoint endpoint) {
  absl::StatusOr<std::string> body = StreamRequestBody(request, endpoint, "stories260K");
  EXPECT_TRUE(body.ok()) << body.status();
  return json::parse(body.ok() ? *body : "null");
}

TEST(StreamRequestBodyTest, ChatStreamsWithUsageAndCarriesTheRequest) {
  v1::GenerateRequest r = Request();
  v1::Message* m = r.mutable_messages()->add_messages();
  m->set_role("system");
  m->set_content("Be brief.");
  m = r.mutable_messages()->add_messages();
  m->set_role("user");
  m->set_content("Once upon a time");
  r.mutable_sampling()->set_top_k(40);
  r.mutable_sampling()->set_seed(7);
  r.add_stop("\n\n");
  r.add_stop_token_ids(2);
  r.set_top_logprobs(3);
  r.set_cache_salt("tenant");
  r.set_session_id("s-1");
  const json body = Body(r, HttpEndpoint::kChat);
  EXPECT_EQ(body["model"], "stories260K");
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"], json({{"include_usage", true}}));
  EXPECT_EQ(body["messages"], json::parse(R"([{"role":"system","content":"Be brief."},
                                              {"role":"user","content":"Once upon a time"}])"));
  EXPECT_EQ(body["max_tokens"], 32);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0.0);
  EXPECT_EQ(body["top_p"], 0.5);
  EXPECT_EQ(body["top_k"], 40);
  EXPECT_EQ(body["seed"], 7);
  EXPECT_EQ(body["stop"], json({"\n\n"}));
  EXPECT_EQ(body["stop_token_ids"], json({2}));
  EXPECT_EQ(body["logprobs"], true);
  EXPECT_EQ(body["top_logprobs"], 3);
  EXPECT_EQ(body["cache_salt"], "tenant");
  EXPECT_EQ(body["session_id"], "s-1");
  EXPECT_FALSE(body.contains("prompt"));
  EXPECT_FALSE(body.contains("min_p"));  // unset fields stay out
  EXPECT_FALSE(body.contains("repetition_penalty"));
  EXPECT_FALSE(body.contains("presence_penalty"));
}

TEST(StreamRequestBodyTest, ChatSendsTextAsOneUserMessage) {
  v1::GenerateRequest r = Request();
  r.set_text("Once upon a time");
  const json body = Body(r, HttpEndpoint::kChat);
  EXPECT_EQ(body["messages"], json::parse(R"([{"role":"user","content":"Once upon a time"}])"));
}

TEST(StreamRequestBodyTest, CompletionsSendsTextOrTokenIds) {
  v1::GenerateRequest r = Request();
  r.set_text("Once upon a time");
  r.set_top_logprobs(2);
  json body = Body(r, HttpEndpoint::kCompletions);
  EXPECT_EQ(body["prompt"], "Once upon a time");
  EXPECT_EQ(body["logprobs"], 2);
  EXPECT_FALSE(body.contains("messages"));
  r.mutable_tokens()->add_ids(1);
  r.mutable_tokens()->add_ids(403);
  body = Body(r, HttpEndpoint::kCompletions);
  EXPECT_EQ(body["prompt"], json({1, 403}));
}

TEST(StreamRequestBodyTest, WhatAnEndpointCannotCarryIsInvalid) {
  v1::GenerateRequest r = Request();
  EXPECT_EQ(StreamRequestBody(r, HttpEndpoint::kChat, "m").status().code(),
            absl::StatusCode::kInvalidArgument);  // no prompt
  r.mutable_tokens()->add_ids(1);
  EXPECT_THAT(StreamRequestBody(r, HttpEndpoint::kChat, "m").status().message(),
              HasSubstr("tokens"));
  r.mutable_messages()->add_messages()->set_role("user");
  EXPECT_THAT(StreamRequestBody(r, HttpEndpoint::kCompletions, "m").status().message(),
              HasSubstr("messages"));
  r.set_text("x");
  r.set_parse_special(true);
  EXPECT_THAT(StreamRequestBody(r, HttpEndpoint::kCompletions, "m").status().message(),
              HasSubstr("parse_special"));
}

// The piece of a chunk that must parse as one.
StreamPiece Piece(std::string_view data, HttpEndpoint endpoint) {
  absl::StatusOr<std::optional<StreamPiece>> piece = ParseStreamData(data, endpoint);
  EXPECT_TRUE(piece.ok()) << piece.status();
  EXPECT_TRUE(piece.ok() && piece->has_value()) << data;
  return piece.ok() && piece->has_value() ? **piece : StreamPiece{.text = "", .tokens = -1};
}

TEST(ParseStreamDataTest, ChatChunksUsageAndDone) {
  const StreamPiece role =
      Piece(R"({"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,)"
            R"("delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null})",
            HttpEndpoint::kChat);
  EXPECT_EQ(role.tokens, 0);  // the role chunk is no token: TTFT waits for content
  EXPECT_FALSE(role.usage.has_value());

  const StreamPiece content = Piece(
      R"({"choices":[{"index":0,"delta":{"content":" Tim"},"finish_reason":null}],"usage":null})",
      HttpEndpoint::kChat);
  EXPECT_EQ(content.text, " Tim");
  EXPECT_EQ(content.tokens, 1);

  EXPECT_EQ(Piece(R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":null})",
                  HttpEndpoint::kChat)
                .tokens,
            0);

  const StreamPiece usage =
      Piece(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":64,)"
            R"("total_tokens":76,"prompt_tokens_details":{"cached_tokens":8},)"
            R"("completion_tokens_details":{"accepted_prediction_tokens":5,)"
            R"("rejected_prediction_tokens":3}}})",
            HttpEndpoint::kChat);
  ASSERT_TRUE(usage.usage.has_value());
  EXPECT_EQ(usage.usage->prompt_tokens(), 12);
  EXPECT_EQ(usage.usage->completion_tokens(), 64);
  EXPECT_EQ(usage.usage->cached_tokens_local(), 8);
  EXPECT_EQ(usage.usage->draft_tokens(), 8);
  EXPECT_EQ(usage.usage->draft_tokens_accepted(), 5);
  EXPECT_EQ(usage.tokens, 0);

  absl::StatusOr<std::optional<StreamPiece>> done = ParseStreamData("[DONE]", HttpEndpoint::kChat);
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(done->has_value());
}

TEST(ParseStreamDataTest, CompletionsTextChunks) {
  const StreamPiece piece = Piece(
      R"({"object":"text_completion","choices":[{"index":0,"text":" upon","finish_reason":null}]})",
      HttpEndpoint::kCompletions);
  EXPECT_EQ(piece.text, " upon");
  EXPECT_EQ(piece.tokens, 1);
}

TEST(ParseStreamDataTest, ErrorsAndMalformedChunks) {
  absl::StatusOr<std::optional<StreamPiece>> error =
      ParseStreamData(R"({"error":{"message":"queue full","type":"rate_limit_exceeded",)"
                      R"("param":null,"code":"rate_limit_exceeded"}})",
                      HttpEndpoint::kChat);
  EXPECT_EQ(error.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(error.status().message(), "queue full");
  EXPECT_EQ(ParseStreamData(R"({"error":{"message":"m","type":"server_error","code":"timeout"}})",
                            HttpEndpoint::kChat)
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ParseStreamData(R"({"error":{"message":"m","type":"invalid_request_error"}})",
                            HttpEndpoint::kChat)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  for (const char* bad : {"{\"choices\":", "[]", "{\"id\":\"x\"}", "{\"choices\":{}}"}) {
    EXPECT_EQ(ParseStreamData(bad, HttpEndpoint::kChat).status().code(),
              absl::StatusCode::kInternal)
        << bad;
  }
}

TEST(HttpErrorStatusTest, StatusCodeAndTheErrorMessage) {
  const absl::Status limited = HttpErrorStatus(
      429, R"({"error":{"message":"engine queue full","type":"rate_limit_exceeded"}})");
  EXPECT_EQ(limited.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(limited.message(), "HTTP 429: engine queue full");
  EXPECT_EQ(HttpErrorStatus(401, "{}").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(HttpErrorStatus(404, "").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(HttpErrorStatus(503, "").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(HttpErrorStatus(504, "").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(HttpErrorStatus(418, "").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(HttpErrorStatus(502, "<html>bad gateway</html>").message(),
            "HTTP 502: <html>bad gateway</html>");
}

TEST(FirstModelIdTest, TheFirstListedModel) {
  EXPECT_EQ(*FirstModelId(R"({"object":"list","data":[{"id":"stories260K","object":"model"},)"
                          R"({"id":"other"}]})"),
            "stories260K");
  EXPECT_EQ(FirstModelId(R"({"object":"list","data":[]})").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(FirstModelId("not json").status().code(), absl::StatusCode::kInternal);
}

TEST(HttpEndpointTest, NamesAndPaths) {
  EXPECT_EQ(HttpEndpointPath(*ParseHttpEndpoint("chat")), "/v1/chat/completions");
  EXPECT_EQ(HttpEndpointPath(*ParseHttpEndpoint("completions")), "/v1/completions");
  EXPECT_EQ(ParseHttpEndpoint("responses").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::client::bench
