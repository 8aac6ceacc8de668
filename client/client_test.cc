// Client against an in-process kvserve with a scripted engine: every call goes through
// the one unary helper, keeps the server's answer, and turns a failure into its
// absl::Status (code and message).
#include "client/client.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/field_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "service/server.h"
#include "service/testing/fake_engine.h"

namespace kvserve::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service::ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.metrics.address = "";
    auto server = service::Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    const char* dir = std::getenv("KVSERVE_MODELS_DIR");
    auto model =
        model::Model::Load(std::string(dir == nullptr ? "models" : dir) + "/stories260K.gguf");
    ASSERT_TRUE(model.ok()) << model.status();
    auto engine = std::make_unique<service::testing::FakeEngine>();
    engine_ = engine.get();
    ASSERT_TRUE(server_->Attach(*std::move(model), std::move(engine), "fake").ok());
    auto client = Client::Connect(absl::StrCat("127.0.0.1:", server_->port()), Client::Options());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  std::unique_ptr<service::Server> server_;
  service::testing::FakeEngine* engine_ = nullptr;
  std::unique_ptr<Client> client_;
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
  absl::Status status = client_->GenerateStream(
      request, [&streamed](const v1::GenerateStreamResponse& m) { streamed += m.text(); });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(streamed, "ab");

  // An engine's field error reaches the client as INVALID_ARGUMENT with the proto name.
  engine_->FailNextSubmit(engine::FieldError("sampling.max_tokens", "must be in [1, 100], got 0"));
  absl::Status invalid = client_->Generate(request).status();
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(invalid.message()), StartsWith("max_tokens"));
}

}  // namespace
}  // namespace kvserve::client
