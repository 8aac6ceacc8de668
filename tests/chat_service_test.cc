// Chat messages end to end: GenerateRequest.messages through the gRPC service with the real
// engine, on a copy of stories260K.gguf given a ChatML tokenizer.chat_template (the
// original has none), and the original for the "no template" answer.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model_loading.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvserve/v1/inference.grpc.pb.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/testing/gguf_copy.h"
#include "service/server.h"

namespace kvserve::service {
namespace {

using ::testing::HasSubstr;

// A ChatML template with a default system prompt (the shape of Qwen 2's).
constexpr char kChatMlTemplate[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string ModelsDir() {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  return dir == nullptr ? "models" : dir;
}

// stories260K.gguf with tokenizer.chat_template set, written with the repo's GGUF writer
// to `path`.
void WriteChatModel(const std::string& path) {
  absl::StatusOr<model::MappedGguf> in = model::OpenGguf(ModelsDir() + "/stories260K.gguf");
  EXPECT_TRUE(in.ok()) << in.status();
  if (!in.ok()) return;
  model::GgufWriter writer(static_cast<uint32_t>(in->gguf.alignment));
  EXPECT_TRUE(model::CopyGguf(in->gguf, &writer).ok());
  writer.SetString("tokenizer.chat_template", kChatMlTemplate);
  const absl::Status written = writer.WriteToFile(path);
  EXPECT_TRUE(written.ok()) << written;
}

v1::Message Msg(const std::string& role, const std::string& content) {
  v1::Message m;
  m.set_role(role);
  m.set_content(content);
  return m;
}

class ChatServiceTest : public ::testing::Test {
 protected:
  // The server goes first: the engine maps the model file.
  void TearDown() override {
    server_.reset();
    std::remove(chat_model_.c_str());
  }

  // Starts on a fresh ChatML copy of stories260K (one per process: tests may run in
  // parallel binaries).
  void StartWithChatModel() {
    chat_model_ = absl::StrCat(::testing::TempDir(), "/stories260K-chatml-", getpid(), ".gguf");
    WriteChatModel(chat_model_);
    Start(chat_model_);
  }

  void Start(const std::string& model_path) {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.metrics.address = "";
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::Inference::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                                       grpc::InsecureChannelCredentials()));
    engine::ModelOptions model_options;
    model_options.model_path = model_path;
    model_options.backend = "cpu_blas";
    model_options.threads = 1;
    model_options.engine.max_tokens_limit = 1000;
    auto loaded = engine::LoadModel(model_options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    block_tokens_ = model_options.engine.block_tokens;
    ASSERT_TRUE(
        server_->Attach(std::move(loaded->model), std::move(loaded->engine), loaded->backend).ok());
  }

  grpc::Status Generate(const v1::GenerateRequest& req, v1::GenerateResponse* resp) {
    grpc::ClientContext ctx;
    return stub_->Generate(&ctx, req, resp);
  }

  static v1::GenerateRequest Greedy(int max_tokens) {
    v1::GenerateRequest req;
    req.mutable_sampling()->set_temperature(0);
    req.set_max_tokens(max_tokens);
    return req;
  }

  std::string chat_model_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  int block_tokens_ = 0;
};

TEST_F(ChatServiceTest, ModelInfoReportsTheTokenizerAndTemplateFamily) {
  StartWithChatModel();
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.architecture(), "llama");
  EXPECT_EQ(info.tokenizer_model(), "llama");
  EXPECT_EQ(info.chat_template(), "chatml");
  EXPECT_EQ(info.sliding_window(), 0);
}

// stories260K's vocabulary has no ChatML control tokens, so the rendering is encoded as
// plain text: messages must give exactly what the rendered string sent as text gives.
TEST_F(ChatServiceTest, MessagesGenerateWhatTheRenderedTextGenerates) {
  StartWithChatModel();
  v1::GenerateRequest chat = Greedy(24);
  *chat.mutable_messages()->add_messages() = Msg("system", "Tell a story.");
  *chat.mutable_messages()->add_messages() = Msg("user", "Once upon a time");
  v1::GenerateResponse by_messages;
  ASSERT_TRUE(Generate(chat, &by_messages).ok());

  v1::GenerateRequest text = Greedy(24);
  text.set_text(
      "<|im_start|>system\nTell a story.<|im_end|>\n<|im_start|>user\nOnce upon a "
      "time<|im_end|>\n<|im_start|>assistant\n");
  v1::GenerateResponse by_text;
  ASSERT_TRUE(Generate(text, &by_text).ok());
  EXPECT_EQ(by_messages.usage().prompt_tokens(), by_text.usage().prompt_tokens());
  EXPECT_EQ(by_messages.text(), by_text.text());
  EXPECT_FALSE(by_messages.text().empty());
}

TEST_F(ChatServiceTest, BadRoleAndOversizedConversationsAreInvalidArgument) {
  StartWithChatModel();
  v1::GenerateRequest req = Greedy(4);
  *req.mutable_messages()->add_messages() = Msg("user", "hi");
  *req.mutable_messages()->add_messages() = Msg("root", "hi");
  v1::GenerateResponse resp;
  grpc::Status status = Generate(req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("messages.messages[1].role"));

  v1::GenerateRequest big = Greedy(4);
  *big.mutable_messages()->add_messages() = Msg("user", std::string((1 << 20) + 1, 'a'));
  status = Generate(big, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("prompt.messages"));
}

TEST_F(ChatServiceTest, ModelWithoutTemplateIsFailedPrecondition) {
  Start(ModelsDir() + "/stories260K.gguf");
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.chat_template(), "");
  v1::GenerateRequest req = Greedy(4);
  *req.mutable_messages()->add_messages() = Msg("user", "hi");
  v1::GenerateResponse resp;
  const grpc::Status status = Generate(req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("no chat template"));
}

// Turn 2 of a session sends only its new message; the server appends the template's end
// of turn and the rendering to the history, so every full block of turn 1's history (its
// prompt and the reply) comes from the prefix cache.
TEST_F(ChatServiceTest, SessionTurnTwoReusesEveryFullBlockOfTurnOne) {
  StartWithChatModel();
  grpc::ClientContext open_ctx;
  v1::Session session;
  ASSERT_TRUE(stub_->OpenSession(&open_ctx, v1::OpenSessionRequest(), &session).ok());

  v1::GenerateRequest turn1 = Greedy(40);
  turn1.set_session_id(session.session_id());
  *turn1.mutable_messages()->add_messages() = Msg("system", "Tell a story.");
  *turn1.mutable_messages()->add_messages() = Msg("user", "Once upon a time");
  v1::GenerateResponse r1;
  ASSERT_TRUE(Generate(turn1, &r1).ok());

  grpc::ClientContext get_ctx;
  v1::GetSessionRequest get;
  get.set_session_id(session.session_id());
  v1::Session after1;
  ASSERT_TRUE(stub_->GetSession(&get_ctx, get, &after1).ok());
  const int history1 = after1.history_tokens();
  ASSERT_GE(history1, r1.usage().prompt_tokens() + r1.usage().completion_tokens());
  ASSERT_GE(history1, 2 * block_tokens_) << "turn 1 too short to show block reuse";

  v1::GenerateRequest turn2 = Greedy(8);
  turn2.set_session_id(session.session_id());
  *turn2.mutable_messages()->add_messages() = Msg("user", "What happened next?");
  v1::GenerateResponse r2;
  ASSERT_TRUE(Generate(turn2, &r2).ok());
  EXPECT_GE(r2.usage().cached_tokens_local(), history1 / block_tokens_ * block_tokens_);
  // The new tokens: the separator "<|im_end|>\n", then the rendered user turn, each
  // encoded as text (stories260K's vocabulary has no control tokens), and no second BOS.
  int expected_new_tokens = 0;
  for (const char* text : {"<|im_end|>\n",
                           "<|im_start|>user\nWhat happened next?<|im_end|>\n<|im_start|>"
                           "assistant\n"}) {
    grpc::ClientContext tok_ctx;
    v1::TokenizeRequest tokenize;
    tokenize.set_text(text);
    v1::TokenizeResponse ids;
    ASSERT_TRUE(stub_->Tokenize(&tok_ctx, tokenize, &ids).ok());
    expected_new_tokens += ids.token_ids_size();
  }
  EXPECT_EQ(r2.usage().prompt_tokens() - history1, expected_new_tokens);
}

}  // namespace
}  // namespace kvserve::service
