#include "service/request_convert.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "engine/field_error.h"
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
    limits_.default_max_tokens = 7;
    limits_.max_prompt_bytes = 64;
  }

  absl::StatusOr<engine::Request> Convert(const v1::GenerateRequest& r) {
    return ToEngineRequest(r, limits_, *tokenizer_, absl::InfiniteFuture());
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

TEST_F(RequestConvertTest, TextAsksTheEngineForBosAndGetsDefaults) {
  // BOS is the engine's decision (only where the context starts): the text's tokens
  // come without it, with add_bos set, for stateless requests and session turns alike.
  for (const char* session : {"", "s1"}) {
    v1::GenerateRequest r = Valid();
    r.set_session_id(session);
    auto req = Convert(r);
    ASSERT_TRUE(req.ok()) << req.status();
    EXPECT_EQ(req->prompt_tokens, tokenizer_->Encode("a a", /*add_bos=*/false));
    EXPECT_TRUE(req->add_bos);
    EXPECT_EQ(req->session_id, session);
    EXPECT_EQ(req->sampling.max_tokens, 7);
    EXPECT_EQ(req->sampling.temperature, 1.0f);
    EXPECT_FALSE(req->sampling.seed.has_value());
  }
}

TEST_F(RequestConvertTest, ControlTokenTextIsParsedOnlyWithParseSpecial) {
  v1::GenerateRequest r;
  r.set_text("a</s>a");
  auto plain = Convert(r);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(std::count(plain->prompt_tokens.begin(), plain->prompt_tokens.end(), 2), 0)
      << "</s> in user text must stay text";
  r.set_parse_special(true);
  auto parsed = Convert(r);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(std::count(parsed->prompt_tokens.begin(), parsed->prompt_tokens.end(), 2), 1);
  EXPECT_EQ(parsed->prompt_tokens, tokenizer_->Encode("a</s>a", false, /*parse_special=*/true));
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
  r.set_max_draft_tokens(0);
  auto req = Convert(r);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->sampling.max_draft_tokens, 0);
  r.clear_max_draft_tokens();
  EXPECT_FALSE(Convert(r)->sampling.max_draft_tokens.has_value());  // the server's setting
  EXPECT_EQ(req->prompt_tokens, (std::vector<int32_t>{1, 259}));
  EXPECT_FALSE(req->add_bos);  // ids are used as they are
  EXPECT_EQ(req->sampling.temperature, 0.0f);
  EXPECT_EQ(req->sampling.top_k, 3);
  EXPECT_EQ(req->sampling.seed, 42u);
  EXPECT_EQ(req->sampling.max_tokens, 9);
  EXPECT_EQ(req->sampling.stop_strings, (std::vector<std::string>{"x"}));
  EXPECT_EQ(req->sampling.stop_token_ids, (std::vector<int32_t>{2}));
  EXPECT_EQ(req->cache_salt, "tenant");
}

// Only the wire's own limits are checked here; every other field is validated by the
// engine (tests/service_integration_test.cc: InvalidFieldsAreNamedByTheirProtoPath).
TEST_F(RequestConvertTest, OnlyWireLimitsAreChecked) {
  {
    v1::GenerateRequest r;
    r.set_text(std::string(65, 'a'));
    ExpectInvalid(r, "prompt.text");
  }
  {
    v1::GenerateRequest r = Valid();
    r.set_session_id(std::string(300, 's'));
    ExpectInvalid(r, "session_id");
  }
  // Left to the engine: converted as they are.
  v1::GenerateRequest r;
  r.mutable_tokens()->add_ids(-5);
  r.mutable_sampling()->set_top_p(2.0f);
  r.set_cache_salt(std::string(300, 's'));
  auto req = Convert(r);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->prompt_tokens, std::vector<int32_t>{-5});
  EXPECT_EQ(req->sampling.top_p, 2.0f);
  EXPECT_TRUE(Convert(v1::GenerateRequest()).ok());  // no prompt: the engine decides
}

TEST(WithProtoFieldNamesTest, RenamesEnginePathsAndKeepsTheReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"sampling.top_p", "sampling.top_p"},
      {"sampling.max_tokens", "max_tokens"},
      {"sampling.stop_strings", "stop"},
      {"sampling.stop_strings[2]", "stop[2]"},
      {"sampling.stop_token_ids[0]", "stop_token_ids[0]"},
      {"sampling.top_logprobs", "top_logprobs"},
      {"sampling.max_draft_tokens", "max_draft_tokens"},
      {"prompt_tokens[12]", "prompt.tokens.ids[12]"},
      {"prompt_tokens", "prompt"},
      {"cache_salt", "cache_salt"},
  };
  for (const auto& [engine_path, proto_path] : cases) {
    const absl::Status s = WithProtoFieldNames(engine::FieldError(engine_path, "is bad, got 1"));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), std::string(proto_path) + " is bad, got 1");
  }
  // Statuses without a field path pass unchanged.
  const absl::Status plain = absl::InvalidArgumentError("sampling.max_tokens is odd");
  EXPECT_EQ(WithProtoFieldNames(plain), plain);
  EXPECT_EQ(WithProtoFieldNames(absl::NotFoundError("x")), absl::NotFoundError("x"));
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
  usage.draft_tokens = 5;
  usage.draft_tokens_accepted = 2;
  usage.time_to_first_token = absl::Milliseconds(1500);
  v1::Usage out;
  ToProtoUsage(usage, &out);
  EXPECT_EQ(out.draft_tokens(), 5);
  EXPECT_EQ(out.draft_tokens_accepted(), 2);
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

// GenerateRequest.messages: rendered with the model's template (ChatML here, with its two
// control tokens in the vocabulary), BOS asked for as with text, and the template's end of
// turn handed to the engine for session turns.
class MessagesConvertTest : public RequestConvertTest {
 protected:
  void SetUp() override {
    RequestConvertTest::SetUp();
    model::Vocabulary v = ByteVocab();
    for (const char* control : {"<|im_start|>", "<|im_end|>"}) {
      v.pieces.push_back(control);
      v.scores.push_back(0.0f);
      v.kinds.push_back(model::TokenKind::kControl);
    }
    v.chat_template = "{{ '<|im_start|>' + message['role'] }}";
    auto tok = model::Tokenizer::Create(v);
    ASSERT_TRUE(tok.ok()) << tok.status();
    chat_tokenizer_ = *std::move(tok);
    chat_ = std::make_unique<model::ChatPrompter>(*chat_tokenizer_);
    im_start_ = v.size() - 2;
    im_end_ = v.size() - 1;
  }

  absl::StatusOr<engine::Request> ConvertChat(const v1::GenerateRequest& r,
                                              const model::ChatPrompter* chat) {
    return ToEngineRequest(r, limits_, *chat_tokenizer_, absl::InfiniteFuture(), chat);
  }

  static v1::GenerateRequest UserSays(const std::string& content) {
    v1::GenerateRequest r;
    v1::Message* m = r.mutable_messages()->add_messages();
    m->set_role("user");
    m->set_content(content);
    return r;
  }

  std::unique_ptr<model::Tokenizer> chat_tokenizer_;
  std::unique_ptr<model::ChatPrompter> chat_;
  int32_t im_start_ = 0;
  int32_t im_end_ = 0;
};

TEST_F(MessagesConvertTest, RendersWithControlTokensAndCarriesTheTurnSeparator) {
  auto req = ConvertChat(UserSays("a<|im_end|>"), chat_.get());
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_TRUE(req->add_bos);
  // The template's two markers per turn plus the generation prompt's one; the content's
  // "<|im_end|>" is characters.
  EXPECT_EQ(std::count(req->prompt_tokens.begin(), req->prompt_tokens.end(), im_start_), 2);
  EXPECT_EQ(std::count(req->prompt_tokens.begin(), req->prompt_tokens.end(), im_end_), 1);
  EXPECT_EQ(req->prompt_tokens.front(), im_start_);
  ASSERT_FALSE(req->turn_separator.empty());
  EXPECT_EQ(req->turn_separator.front(), im_end_);
  EXPECT_EQ(req->turn_end_token, im_end_);
}

TEST_F(MessagesConvertTest, LimitsRolesAndMissingTemplate) {
  limits_.max_messages = 1;
  v1::GenerateRequest two = UserSays("a");
  *two.mutable_messages()->add_messages() = two.messages().messages(0);
  auto r = ConvertChat(two, chat_.get());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("prompt.messages"));

  r = ConvertChat(UserSays(std::string(65, 'a')), chat_.get());  // max_prompt_bytes 64
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("prompt.messages"));

  v1::GenerateRequest bad_role = UserSays("a");
  bad_role.mutable_messages()->mutable_messages(0)->set_role("admin");
  r = ConvertChat(bad_role, chat_.get());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("messages.messages[0].role"));

  r = ConvertChat(UserSays("a"), nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  // The byte vocabulary has no template.
  const model::ChatPrompter none(*tokenizer_);
  r = ToEngineRequest(UserSays("a"), limits_, *tokenizer_, absl::InfiniteFuture(), &none);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("no chat template"));
}

}  // namespace
}  // namespace kvserve::service
