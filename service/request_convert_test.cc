#include "service/request_convert.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer.h"
#include "model/vocabulary.h"

namespace kvserve::service {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A byte-level vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then "▁a".
model::Vocabulary ByteVocab() {
  model::Vocabulary v;
  auto add = [&v](std::string piece, model::TokenKind kind) {
    v.pieces.push_back(std::move(piece));
    v.scores.push_back(0.0f);
    v.kinds.push_back(kind);
  };
  add("<unk>", model::TokenKind::kUnknown);
  add("<s>", model::TokenKind::kControl);
  add("</s>", model::TokenKind::kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, model::TokenKind::kByte);
  }
  add("\xe2\x96\x81"
      "a",
      model::TokenKind::kNormal);
  return v;
}

class RequestConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = model::Tokenizer::Create(ByteVocab());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = *std::move(tok);
    limits_.vocab_size = tokenizer_->vocab().size();
    limits_.context_length = 32;
    limits_.max_tokens_limit = 100;
    limits_.default_max_tokens = 7;
    limits_.max_prompt_bytes = 64;
  }

  absl::StatusOr<engine::Request> Convert(const v1::GenerateRequest& r, int32_t history = 0) {
    return ToEngineRequest(r, limits_, *tokenizer_, history, absl::InfiniteFuture());
  }

  // Expects INVALID_ARGUMENT whose message starts with `field`.
  void ExpectInvalid(const v1::GenerateRequest& r, const std::string& field) {
    auto result = Convert(r);
    ASSERT_FALSE(result.ok()) << "expected an error naming " << field;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(result.status().message()), StartsWith(field));
  }

  v1::GenerateRequest Valid() {
    v1::GenerateRequest r;
    r.set_text("a a");
    return r;
  }

  std::unique_ptr<model::Tokenizer> tokenizer_;
  RequestLimits limits_;
};

TEST_F(RequestConvertTest, TextPromptGetsBosAndDefaults) {
  auto req = Convert(Valid());
  ASSERT_TRUE(req.ok()) << req.status();
  ASSERT_FALSE(req->prompt_tokens.empty());
  EXPECT_EQ(req->prompt_tokens.front(), 1);  // BOS
  EXPECT_EQ(req->sampling.max_tokens, 7);
  EXPECT_EQ(req->sampling.temperature, 1.0f);
  EXPECT_FALSE(req->sampling.seed.has_value());
}

TEST_F(RequestConvertTest, SessionTurnWithHistoryGetsNoBos) {
  v1::GenerateRequest r = Valid();
  r.set_session_id("s1");
  auto req = Convert(r, /*history=*/5);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_NE(req->prompt_tokens.front(), 1);
  EXPECT_EQ(req->session_id, "s1");
}

TEST_F(RequestConvertTest, TokenPromptAndSamplingAreCopied) {
  v1::GenerateRequest r;
  r.mutable_tokens()->add_ids(1);
  r.mutable_tokens()->add_ids(259);
  r.mutable_sampling()->set_temperature(0.0f);
  r.mutable_sampling()->set_top_k(3);
  r.mutable_sampling()->set_seed(42);
  r.set_max_tokens(9);
  r.add_stop("x");
  r.add_stop_token_ids(2);
  r.set_cache_salt("tenant");
  auto req = Convert(r);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->prompt_tokens, (std::vector<int32_t>{1, 259}));
  EXPECT_EQ(req->sampling.temperature, 0.0f);
  EXPECT_EQ(req->sampling.top_k, 3);
  EXPECT_EQ(req->sampling.seed, 42u);
  EXPECT_EQ(req->sampling.max_tokens, 9);
  EXPECT_EQ(req->sampling.stop_strings, (std::vector<std::string>{"x"}));
  EXPECT_EQ(req->sampling.stop_token_ids, (std::vector<int32_t>{2}));
  EXPECT_EQ(req->cache_salt, "tenant");
}

TEST_F(RequestConvertTest, EveryInvalidFieldIsNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  {
    v1::GenerateRequest r = Valid();
    r.mutable_sampling()->set_temperature(-1);
    ExpectInvalid(r, "sampling.temperature");
  }
  {
    v1::GenerateRequest r = Valid();
    r.mutable_sampling()->set_temperature(nan);
    ExpectInvalid(r, "sampling.temperature");
  }
  for (float top_p : {0.0f, 1.5f, -0.1f, nan}) {
    v1::GenerateRequest r = Valid();
    r.mutable_sampling()->set_top_p(top_p);
    ExpectInvalid(r, "sampling.top_p");
  }
  {
    v1::GenerateRequest r = Valid();
    r.mutable_sampling()->set_top_k(-1);
    ExpectInvalid(r, "sampling.top_k");
  }
  {
    v1::GenerateRequest r = Valid();
    r.mutable_sampling()->set_min_p(2);
    ExpectInvalid(r, "sampling.min_p");
  }
  {
    v1::GenerateRequest r = Valid();
    r.mutable_sampling()->set_repetition_penalty(0);
    ExpectInvalid(r, "sampling.repetition_penalty");
  }
  {
    v1::GenerateRequest r = Valid();
    r.mutable_sampling()->set_frequency_penalty(3);
    ExpectInvalid(r, "sampling.frequency_penalty");
  }
  {
    v1::GenerateRequest r = Valid();
    r.mutable_sampling()->set_presence_penalty(-3);
    ExpectInvalid(r, "sampling.presence_penalty");
  }
  for (int max_tokens : {0, -1, 101}) {
    v1::GenerateRequest r = Valid();
    r.set_max_tokens(max_tokens);
    ExpectInvalid(r, "max_tokens");
  }
  {
    v1::GenerateRequest r = Valid();
    r.add_stop("");
    ExpectInvalid(r, "stop[0]");
  }
  {
    v1::GenerateRequest r = Valid();
    r.add_stop_token_ids(100000);
    ExpectInvalid(r, "stop_token_ids[0]");
  }
  {
    v1::GenerateRequest r = Valid();
    r.set_top_logprobs(21);
    ExpectInvalid(r, "top_logprobs");
  }
  {
    v1::GenerateRequest r;
    r.mutable_tokens()->add_ids(1);
    r.mutable_tokens()->add_ids(100000);
    ExpectInvalid(r, "prompt.tokens.ids[1]");
  }
  {
    v1::GenerateRequest r;
    r.mutable_tokens()->add_ids(-5);
    ExpectInvalid(r, "prompt.tokens.ids[0]");
  }
  {
    v1::GenerateRequest r;
    r.set_text(std::string(65, 'a'));
    ExpectInvalid(r, "prompt.text");
  }
  {
    v1::GenerateRequest r;  // no prompt at all
    ExpectInvalid(r, "prompt");
  }
  {
    v1::GenerateRequest r;  // longer than the context (32)
    for (int i = 0; i < 32; ++i) r.mutable_tokens()->add_ids(3);
    ExpectInvalid(r, "prompt");
  }
  {
    v1::GenerateRequest r;
    r.set_text(std::string(40, 'b'));  // 40 byte tokens + BOS > 32
    ExpectInvalid(r, "prompt");
  }
  {
    v1::GenerateRequest r = Valid();
    r.set_cache_salt(std::string(300, 's'));
    ExpectInvalid(r, "cache_salt");
  }
  {
    v1::GenerateRequest r = Valid();
    r.set_session_id(std::string(300, 's'));
    ExpectInvalid(r, "session_id");
  }
}

TEST(CheckSessionIdTest, EmptyAndOverlongIdsAreNamedNotEchoed) {
  RequestLimits limits;
  EXPECT_TRUE(CheckSessionId("s-0123", limits, "session_id").ok());
  EXPECT_TRUE(CheckSessionId(std::string(128, 'a'), limits, "session_id").ok());
  absl::Status empty = CheckSessionId("", limits, "parent_session_id");
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.message(), "parent_session_id must not be empty");
  const std::string huge(1 << 20, 'x');
  absl::Status long_id = CheckSessionId(huge, limits, "session_id");
  EXPECT_EQ(long_id.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(long_id.message(), "session_id is 1048576 bytes, at most 128 allowed");
}

TEST_F(RequestConvertTest, HistoryCountsAgainstTheContext) {
  v1::GenerateRequest r;
  for (int i = 0; i < 10; ++i) r.mutable_tokens()->add_ids(3);
  EXPECT_TRUE(Convert(r, /*history=*/21).ok());
  auto too_long = Convert(r, /*history=*/22);
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(std::string(too_long.status().message()), HasSubstr("session history"));
}

TEST_F(RequestConvertTest, FinishReasonsAndStatuses) {
  EXPECT_EQ(ToProtoFinishReason(engine::FinishReason::kStop), v1::FINISH_REASON_STOP);
  EXPECT_EQ(ToProtoFinishReason(engine::FinishReason::kStopString), v1::FINISH_REASON_STOP_STRING);
  EXPECT_EQ(ToProtoFinishReason(engine::FinishReason::kLength), v1::FINISH_REASON_LENGTH);
  EXPECT_TRUE(FinishStatus(engine::FinishReason::kLength, absl::OkStatus()).ok());
  EXPECT_EQ(FinishStatus(engine::FinishReason::kDeadline, absl::OkStatus()).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(FinishStatus(engine::FinishReason::kCancelled, absl::OkStatus()).code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(FinishStatus(engine::FinishReason::kError, absl::OkStatus()).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(FinishStatus(engine::FinishReason::kError, absl::ResourceExhaustedError("kv")).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(RequestConvertTest, UsageAndTtl) {
  engine::Usage usage;
  usage.prompt_tokens = 10;
  usage.cached_tokens = 4;
  usage.cached_tokens_remote = 2;
  usage.computed_tokens = 4;
  usage.completion_tokens = 3;
  usage.time_to_first_token = absl::Milliseconds(1500);
  v1::Usage out;
  ToProtoUsage(usage, &out);
  EXPECT_EQ(out.cached_tokens_local(), 4);
  EXPECT_EQ(out.cached_tokens_remote(), 2);
  EXPECT_EQ(out.time_to_first_token().seconds(), 1);
  EXPECT_EQ(out.time_to_first_token().nanos(), 500000000);

  google::protobuf::Duration ttl;
  ttl.set_seconds(-1);
  EXPECT_EQ(SessionTtl(ttl, "ttl").status().code(), absl::StatusCode::kInvalidArgument);
  ttl.set_seconds(30);
  EXPECT_EQ(*SessionTtl(ttl, "ttl"), absl::Seconds(30));
}

}  // namespace
}  // namespace kvserve::service

namespace kvserve::service {
namespace {

TEST(AppendTokenTest, TextOnlyEventAddsNoTokenId) {
  google::protobuf::RepeatedField<int32_t> ids;
  google::protobuf::RepeatedPtrField<v1::TokenLogprobs> logprobs;
  engine::TokenEvent sampled;
  sampled.token = 7;
  sampled.logprob = -0.5f;
  AppendToken(sampled, /*with_logprobs=*/true, &ids, &logprobs);
  engine::TokenEvent text_only;
  text_only.token = engine::kTextOnlyToken;
  text_only.text = "held back";
  AppendToken(text_only, /*with_logprobs=*/true, &ids, &logprobs);
  ASSERT_EQ(ids.size(), 1);
  EXPECT_EQ(ids[0], 7);
  ASSERT_EQ(logprobs.size(), 1);
  EXPECT_EQ(logprobs[0].token_id(), 7);
}

}  // namespace
}  // namespace kvserve::service
