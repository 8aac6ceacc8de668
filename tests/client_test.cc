// Client against an in-process kvserve with a scripted engine: every call keeps the
// server's answer and turns a failure into its absl::Status (code and message); the
// stream iterator delivers messages as the engine emits them and cancels; overload is
// retried after the server's hint (the client's sleep is injected: no real waiting);
// bearer tokens.
#include "client/client.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/field_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "server/bearer_auth.h"
#include "service/server.h"
#include "service/testing/fake_engine.h"

namespace kvserve::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }

  // (Re)starts the server with `service_options` and a client with `client_options`
  // whose sleeps are recorded in sleeps_ instead of waited.
  void Start(service::InferenceService::Options service_options = {},
             Client::Options client_options = {}, bool attach = true) {
    client_.reset();
    server_.reset();
    service::ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.metrics.address = "";
    options.service = std::move(service_options);
    auto server = service::Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    const char* dir = std::getenv("KVSERVE_MODELS_DIR");
    auto model =
        model::Model::Load(std::string(dir == nullptr ? "models" : dir) + "/stories260K.gguf");
    ASSERT_TRUE(model.ok()) << model.status();
    auto engine = std::make_unique<service::testing::FakeEngine>();
    engine_ = engine.get();
    if (attach) {
      ASSERT_TRUE(server_->Attach(*std::move(model), std::move(engine), "fake").ok());
    }
    client_options.sleep = [this](absl::Duration d) {
      absl::MutexLock lock(&sleeps_mu_);
      sleeps_.push_back(d);
    };
    client_options.uniform = [] { return 0.5; };
    auto client = Client::Connect(absl::StrCat("127.0.0.1:", server_->port()), client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  std::unique_ptr<service::Server> server_;
  service::testing::FakeEngine* engine_ = nullptr;
  std::unique_ptr<Client> client_;
  absl::Mutex sleeps_mu_;
  std::vector<absl::Duration> sleeps_;
};

TEST_F(ClientTest, TokenizeDetokenizeAndModelInfo) {
  absl::StatusOr<std::vector<int32_t>> ids = client_->Tokenize("Once upon a time", true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ(ids->front(), 1);  // BOS
  absl::StatusOr<std::string> text =
      client_->Detokenize(std::vector<int32_t>(ids->begin() + 1, ids->end()));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("Once upon a time"));

  absl::StatusOr<std::string> bad = client_->Detokenize({100000});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), StartsWith("token_ids"));

  absl::StatusOr<v1::ModelInfo> info = client_->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->vocab_size(), 512);
  EXPECT_EQ(info->backend(), "fake");
}

TEST_F(ClientTest, SessionCallsAndTheirErrors) {
  absl::StatusOr<v1::Session> session = client_->OpenSession(absl::Seconds(30));
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_FALSE(session->session_id().empty());
  EXPECT_EQ(client_->OpenSession(absl::Seconds(-5)).status().code(),
            absl::StatusCode::kInvalidArgument);

  absl::StatusOr<v1::Session> fork = client_->ForkSession(session->session_id());
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_NE(fork->session_id(), session->session_id());

  absl::StatusOr<v1::Session> got = client_->GetSession(fork->session_id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->session_id(), fork->session_id());

  EXPECT_TRUE(client_->CloseSession(fork->session_id()).ok());
  absl::Status gone = client_->GetSession(fork->session_id()).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(gone.message().empty());
  EXPECT_EQ(client_->CloseSession(std::string(200, 's')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->ForkSession("no-such-session").status().code(), absl::StatusCode::kNotFound);
}

engine::TokenEvent Token(int32_t id, const std::string& text) {
  engine::TokenEvent event;
  event.token = id;
  event.text = text;
  return event;
}

TEST_F(ClientTest, GenerateAndGenerateStream) {
  engine_->SetImmediateTokens({Token(10, "a"), Token(11, "b")});
  v1::GenerateRequest request;
  request.set_text("Once");
  absl::StatusOr<v1::GenerateResponse> response = client_->Generate(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->text(), "ab");
  EXPECT_THAT(response->token_ids(), ElementsAre(10, 11));

  std::string streamed;
  absl::Status status = client_->StreamGenerate(
      request, [&streamed](const v1::GenerateStreamResponse& m) { streamed += m.text(); });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(streamed, "ab");

  // An engine's field error reaches the client as INVALID_ARGUMENT with the proto name.
  engine_->FailNextSubmit(engine::FieldError("sampling.max_tokens", "must be in [1, 100], got 0"));
  absl::Status invalid = client_->Generate(request).status();
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(invalid.message()), StartsWith("max_tokens"));
}

// The iterator hands out each message as the engine produces it, the last with the
// finish reason; Cancel from another thread ends the call on the server too.
TEST_F(ClientTest, StreamIteratorDeliversTokensInOrderAndCancels) {
  v1::GenerateRequest request;
  request.set_text("Once");
  std::unique_ptr<GenerateStream> stream = client_->StartGenerateStream(request);
  std::thread engine_side([&] {
    ASSERT_TRUE(engine_->WaitSubmitted(1, absl::Seconds(10)).has_value());
    engine_->Emit(1, 10, "a");
  });
  v1::GenerateStreamResponse m;
  ASSERT_TRUE(stream->Next(&m));
  engine_side.join();
  EXPECT_EQ(m.text(), "a");
  EXPECT_THAT(m.token_ids(), ElementsAre(10));
  engine_->Emit(1, 11, "b");
  ASSERT_TRUE(stream->Next(&m));
  EXPECT_EQ(m.text(), "b");
  engine_->Finish(1, absl::OkStatus(), engine::FinishReason::kLength);
  std::string rest;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  while (stream->Next(&m)) {
    rest += m.text();
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) reason = m.finish_reason();
  }
  EXPECT_EQ(rest, "");
  EXPECT_EQ(reason, v1::FINISH_REASON_LENGTH);
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(stream->info().attempts, 1);

  // A second stream, cancelled by another thread while Next waits for a token.
  std::unique_ptr<GenerateStream> cancelled = client_->StartGenerateStream(request);
  std::thread canceller([&] {
    ASSERT_TRUE(engine_->WaitSubmitted(2, absl::Seconds(10)).has_value());
    engine_->Emit(2, 12, "c");
    ASSERT_TRUE(engine_->WaitSubmitted(2, absl::Seconds(10)).has_value());
  });
  ASSERT_TRUE(cancelled->Next(&m));
  canceller.join();
  cancelled->Cancel();
  while (cancelled->Next(&m)) {
  }
  EXPECT_EQ(cancelled->Finish().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(engine_->WaitReleased(2, absl::Seconds(10)));
  EXPECT_THAT(engine_->cancelled(), ElementsAre(2));
  // Cancel before the first Next: nothing is sent.
  std::unique_ptr<GenerateStream> never = client_->StartGenerateStream(request);
  never->Cancel();
  EXPECT_FALSE(never->Next(&m));
  EXPECT_EQ(never->Finish().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(engine_->submitted().size(), 2u);
}

// RESOURCE_EXHAUSTED with the server's hint (grpc-retry-pushback-ms) is retried after
// exactly the hint, for unary and streamed calls; without retries the status comes back.
TEST_F(ClientTest, OverloadIsRetriedAfterTheServersHint) {
  service::InferenceService::Options service_options;
  service_options.retry_after = absl::Milliseconds(750);
  Start(service_options);
  engine_->SetImmediateTokens({Token(10, "a")});
  v1::GenerateRequest request;
  request.set_text("Once");

  engine_->FailNextSubmit(absl::ResourceExhaustedError("queue is full"));
  CallInfo info;
  absl::StatusOr<v1::GenerateResponse> response = client_->Generate(request, &info);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->text(), "a");
  EXPECT_EQ(info.attempts, 2);
  {
    absl::MutexLock lock(&sleeps_mu_);
    EXPECT_THAT(sleeps_, ElementsAre(absl::Milliseconds(750)));
  }

  engine_->FailNextSubmit(absl::ResourceExhaustedError("queue is full"));
  std::string text;
  EXPECT_TRUE(
      client_
          ->StreamGenerate(
              request, [&](const v1::GenerateStreamResponse& m) { text += m.text(); }, &info)
          .ok());
  EXPECT_EQ(text, "a");
  EXPECT_EQ(info.attempts, 2);
  {
    absl::MutexLock lock(&sleeps_mu_);
    EXPECT_THAT(sleeps_, ElementsAre(absl::Milliseconds(750), absl::Milliseconds(750)));
  }

  // No retries: the overload reaches the caller with its message.
  Client::Options once;
  once.retry.max_attempts = 1;
  Start(service_options, once);
  engine_->SetImmediateTokens({Token(10, "a")});
  engine_->FailNextSubmit(absl::ResourceExhaustedError("queue is full"));
  absl::Status status = client_->Generate(request, &info).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("queue is full"));
  EXPECT_EQ(info.attempts, 1);
  // Errors that retrying cannot fix are not retried.
  engine_->FailNextSubmit(absl::NotFoundError("unknown session"));
  EXPECT_EQ(client_->Generate(request).status().code(), absl::StatusCode::kNotFound);
}

// A single replica answering UNAVAILABLE (model still loading) is retried until the
// attempts are used up.
TEST_F(ClientTest, UnavailableIsRetriedUntilAttemptsAreUsedUp) {
  Client::Options options;
  options.retry.max_attempts = 3;
  options.retry.initial_backoff = absl::Milliseconds(100);
  Start({}, options, /*attach=*/false);
  absl::Status status = client_->GetModelInfo().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("loading"));
  absl::MutexLock lock(&sleeps_mu_);
  // The server's hint (1 s, its default) wins over the 100 ms backoff.
  EXPECT_THAT(sleeps_, ElementsAre(absl::Seconds(1), absl::Seconds(1)));
}

TEST_F(ClientTest, BearerTokenIsSent) {
  service::InferenceService::Options service_options;
  service_options.auth = *server::BearerAuth::Parse("secret-a alice\n");
  Client::Options with_token;
  with_token.bearer_token = "secret-a";
  Start(service_options, with_token);
  EXPECT_TRUE(client_->GetModelInfo().ok());
  absl::StatusOr<v1::Session> session = client_->OpenSession();
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_TRUE(client_->GetSession(session->session_id()).ok());
  Start(service_options, Client::Options());
  EXPECT_EQ(client_->GetModelInfo().status().code(), absl::StatusCode::kUnauthenticated);
  {
    absl::MutexLock lock(&sleeps_mu_);
    EXPECT_TRUE(sleeps_.empty());  // not retried
  }
}

}  // namespace
}  // namespace kvserve::client
