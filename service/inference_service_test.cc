// Service-layer tests over real gRPC with a scripted fake engine: admission, validation,
// status mapping, overload, streaming, cancellation, deadlines, health and drain.
// (The end-to-end tests with the real engine are tests/service_integration_test.cc.)
#include "service/inference_service.h"

#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/field_error.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvserve/v1/inference.grpc.pb.h"
#include "model/model.h"
#include "service/server.h"
#include "service/testing/fake_engine.h"

namespace kvserve::service {
namespace {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::unique_ptr<model::Model> LoadStories() {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  std::string path = std::string(dir == nullptr ? "models" : dir) + "/stories260K.gguf";
  auto model = model::Model::Load(path);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

std::string Trailer(const grpc::ClientContext& ctx, const std::string& key) {
  auto it = ctx.GetServerTrailingMetadata().find(key);
  if (it == ctx.GetServerTrailingMetadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

class InferenceServiceTest : public ::testing::Test {
 protected:
  void StartServer(bool attach = true, int32_t max_message_bytes = 4 << 20) {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.metrics.address = "";
    options.max_receive_message_bytes = max_message_bytes;
    options.service.limits.default_max_tokens = 10;
    options.service.auth = auth_;
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    stub_ = v1::Inference::NewStub(channel);
    health_ = grpc::health::v1::Health::NewStub(channel);
    if (attach) Attach();
  }

  void Attach() {
    auto engine = std::make_unique<testing::FakeEngine>();
    engine->SetSubmitLimits(
        {.max_tokens_limit = 100,
         .stop_limits = {
             .max_stop_strings = 3, .max_stop_string_bytes = 40, .max_stop_token_ids = 5}});
    engine_ = engine.get();
    auto model = LoadStories();
    ASSERT_NE(model, nullptr);
    ASSERT_TRUE(server_->Attach(std::move(model), std::move(engine), "fake").ok());
  }

  HealthCheckResponse::ServingStatus Health(const std::string& service) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    HealthCheckRequest req;
    req.set_service(service);
    HealthCheckResponse resp;
    grpc::Status s = health_->Check(&ctx, req, &resp);
    if (!s.ok()) return HealthCheckResponse::UNKNOWN;
    return resp.status();
  }

  // Polls readiness until it equals `want` (bounded: 5 s).
  bool WaitReadiness(HealthCheckResponse::ServingStatus want) {
    const absl::Time end = absl::Now() + absl::Seconds(5);
    while (absl::Now() < end) {
      if (Health(kReadinessService) == want) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  grpc::Status Generate(const v1::GenerateRequest& req, v1::GenerateResponse* resp,
                        grpc::ClientContext* ctx = nullptr) {
    grpc::ClientContext local;
    if (ctx == nullptr) ctx = &local;
    if (ctx->deadline() == std::chrono::system_clock::time_point::max()) {
      ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    }
    return stub_->Generate(ctx, req, resp);
  }

  // A unary Generate on another thread (the fake engine holds requests until told).
  std::future<grpc::Status> GenerateAsync(const v1::GenerateRequest& req) {
    return std::async(std::launch::async, [this, req] {
      v1::GenerateResponse resp;
      return Generate(req, &resp);
    });
  }

  // What a stream delivered after its first messages.
  struct StreamOutput {
    std::string text;
    std::vector<int32_t> token_ids;
    v1::GenerateStreamResponse last;
  };
  static StreamOutput ReadRest(grpc::ClientReader<v1::GenerateStreamResponse>* reader) {
    StreamOutput out;
    v1::GenerateStreamResponse msg;
    while (reader->Read(&msg)) {
      out.text += msg.text();
      out.token_ids.insert(out.token_ids.end(), msg.token_ids().begin(), msg.token_ids().end());
      out.last = msg;
    }
    return out;
  }

  // A stream whose engine request has emitted "Hello" (token 7), read as `first`.
  struct StartedStream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::GenerateStreamResponse>> reader;
    v1::GenerateStreamResponse first;
    // The engine request's id; nullopt (and a test failure) when "Hello" did not arrive.
    std::optional<engine::RequestId> id;
  };
  std::unique_ptr<StartedStream> StartStream() {
    auto stream = std::make_unique<StartedStream>();
    stream->reader = stub_->GenerateStream(&stream->ctx, TextRequest("x"));
    stream->id = engine_->WaitSubmitted(1, absl::Seconds(5));
    if (!stream->id.has_value() || !engine_->Emit(*stream->id, 7, "Hello") ||
        !stream->reader->Read(&stream->first)) {
      ADD_FAILURE() << "the stream's first token did not arrive";
      stream->id.reset();
    }
    return stream;
  }

  static v1::GenerateRequest TextRequest(const std::string& text) {
    v1::GenerateRequest req;
    req.set_text(text);
    req.mutable_sampling()->set_temperature(0);
    return req;
  }

  std::unique_ptr<Server> server_;
  testing::FakeEngine* engine_ = nullptr;
  std::unique_ptr<v1::Inference::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  // Options::auth of the next StartServer.
  std::optional<server::BearerAuth> auth_;
};

TEST_F(InferenceServiceTest, NotReadyUntilAttached) {
  StartServer(/*attach=*/false);
  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(kReadinessService), HealthCheckResponse::NOT_SERVING);
  grpc::ClientContext ctx;
  v1::GenerateResponse resp;
  grpc::Status s = Generate(TextRequest("Once"), &resp, &ctx);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Trailer(ctx, "retry-after"), "1");
  Attach();
  EXPECT_EQ(Health(kReadinessService), HealthCheckResponse::SERVING);
}

// With Options::auth the token is checked first (an unauthenticated caller does not even
// learn that the model is loading), and its name is the tenant of the engine request.
TEST_F(InferenceServiceTest, AuthenticatedTenantReachesTheEngine) {
  auth_ = *server::BearerAuth::Parse("secret-a alice\nsecret-b bob\n");
  StartServer(/*attach=*/false);
  {
    grpc::ClientContext ctx;
    v1::GenerateResponse resp;
    EXPECT_EQ(Generate(TextRequest("Once"), &resp, &ctx).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer secret-b");
    v1::GenerateResponse resp;
    EXPECT_EQ(Generate(TextRequest("Once"), &resp, &ctx).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);
  Attach();
  engine_->SetImmediateTokens({});
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer secret-b");
  v1::GenerateResponse resp;
  ASSERT_TRUE(Generate(TextRequest("Once"), &resp, &ctx).ok());
  ASSERT_EQ(engine_->submitted().size(), 1u);
  EXPECT_EQ(engine_->submitted()[0].tenant, "bob");
}

// The engine validates requests (once); the service renames the engine's field paths
// to the proto's, without reading messages (tests/service_integration_test.cc sends the
// invalid requests themselves to the real engine).
TEST_F(InferenceServiceTest, EngineFieldErrorsComeBackWithProtoFieldNames) {
  StartServer();
  const std::pair<std::string, std::string> renames[] = {
      {"sampling.temperature", "sampling.temperature"},
      {"sampling.max_tokens", "max_tokens"},
      {"sampling.stop_strings[1]", "stop[1]"},
      {"sampling.stop_token_ids[0]", "stop_token_ids[0]"},
      {"sampling.top_logprobs", "top_logprobs"},
      {"prompt_tokens[7]", "prompt.tokens.ids[7]"},
      {"prompt_tokens", "prompt"},
      {"cache_salt", "cache_salt"},
  };
  for (const auto& [engine_field, proto_field] : renames) {
    engine_->FailNextSubmit(engine::FieldError(engine_field, "is wrong, got 3"));
    v1::GenerateResponse resp;
    grpc::Status s = Generate(TextRequest("Once upon a time"), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << engine_field;
    EXPECT_EQ(s.error_message(), proto_field + " is wrong, got 3");
  }
  // What only the wire has is checked before the engine: the text's size, session ids.
  v1::GenerateRequest long_id = TextRequest("Once");
  long_id.set_session_id(std::string(300, 's'));
  v1::GenerateResponse resp;
  grpc::Status s = Generate(long_id, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("session_id"));
  EXPECT_TRUE(engine_->submitted().empty());
}

TEST_F(InferenceServiceTest, UnknownSessionIsNotFound) {
  StartServer();
  v1::GenerateRequest req = TextRequest("Once");
  req.set_session_id("no-such-session");
  v1::GenerateResponse resp;
  EXPECT_EQ(Generate(req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext ctx;
  v1::GetSessionRequest get;
  get.set_session_id("no-such-session");
  v1::Session session;
  EXPECT_EQ(stub_->GetSession(&ctx, get, &session).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(InferenceServiceTest, OversizedMessageIsRejectedBeforeTheService) {
  StartServer(/*attach=*/true, /*max_message_bytes=*/16 << 10);
  v1::GenerateResponse resp;
  grpc::Status s = Generate(TextRequest(std::string(32 << 10, 'a')), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(engine_->submitted().empty());
}

TEST_F(InferenceServiceTest, OverloadIsResourceExhaustedWithRetryHint) {
  StartServer();
  engine_->FailNextSubmit(absl::ResourceExhaustedError("queue is full (1024 waiting)"));
  grpc::ClientContext ctx;
  v1::GenerateResponse resp;
  grpc::Status s = Generate(TextRequest("Once"), &resp, &ctx);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("queue is full"));
  EXPECT_EQ(Trailer(ctx, "grpc-retry-pushback-ms"), "1000");
  EXPECT_EQ(Trailer(ctx, "retry-after"), "1");
}

TEST_F(InferenceServiceTest, UnaryAndStreamingDeliverTheEngineOutput) {
  StartServer();
  std::vector<engine::TokenEvent> tokens(3);
  tokens[0] = {.token = 10, .text = "Once"};
  tokens[1] = {.token = 11, .text = " upon"};
  tokens[2] = {.token = 12, .text = " a"};
  engine_->SetImmediateTokens(tokens);

  v1::GenerateResponse resp;
  ASSERT_TRUE(Generate(TextRequest("x"), &resp).ok());
  EXPECT_EQ(resp.text(), "Once upon a");
  EXPECT_THAT(resp.token_ids(), ::testing::ElementsAre(10, 11, 12));
  EXPECT_EQ(resp.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(resp.usage().completion_tokens(), 3);

  grpc::ClientContext ctx;
  auto reader = stub_->GenerateStream(&ctx, TextRequest("x"));
  const StreamOutput out = ReadRest(reader.get());
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(out.text, "Once upon a");
  EXPECT_EQ(out.token_ids, (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(out.last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(out.last.usage().completion_tokens(), 3);
}

TEST_F(InferenceServiceTest, StreamDeliversTokensAsTheyArrive) {
  StartServer();
  std::unique_ptr<StartedStream> stream = StartStream();
  ASSERT_TRUE(stream->id.has_value());  // the first token arrived before the request finished
  EXPECT_EQ(stream->first.text(), "Hello");
  EXPECT_EQ(stream->first.finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  ASSERT_TRUE(engine_->Emit(*stream->id, 8, " world"));
  engine::Usage usage;
  usage.completion_tokens = 2;
  ASSERT_TRUE(engine_->Finish(*stream->id, absl::OkStatus(), engine::FinishReason::kStop, usage));
  const StreamOutput rest = ReadRest(stream->reader.get());
  EXPECT_TRUE(stream->reader->Finish().ok());
  EXPECT_EQ(rest.text, " world");
  EXPECT_EQ(rest.token_ids, (std::vector<int32_t>{8}));
  EXPECT_EQ(rest.last.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(rest.last.usage().completion_tokens(), 2);
}

TEST_F(InferenceServiceTest, ClientCancellationReachesTheEngine) {
  StartServer();
  std::unique_ptr<StartedStream> stream = StartStream();
  ASSERT_TRUE(stream->id.has_value());
  stream->ctx.TryCancel();
  EXPECT_TRUE(engine_->WaitReleased(*stream->id, absl::Seconds(5)));
  EXPECT_THAT(engine_->cancelled(), ::testing::Contains(*stream->id));
  ReadRest(stream->reader.get());
  EXPECT_EQ(stream->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(InferenceServiceTest, DeadlineReachesTheEngine) {
  StartServer();
  grpc::ClientContext ctx;
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(300);
  ctx.set_deadline(deadline);
  v1::GenerateResponse resp;
  grpc::Status s = Generate(TextRequest("x"), &resp, &ctx);  // the fake never finishes
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  auto requests = engine_->submitted();
  ASSERT_EQ(requests.size(), 1u);
  // The engine got the client's deadline, and the expired call cancelled the request.
  EXPECT_LE(absl::AbsDuration(requests[0].deadline - absl::FromChrono(deadline)),
            absl::Milliseconds(50));
  EXPECT_TRUE(engine_->WaitReleased(1, absl::Seconds(5)));
}

TEST_F(InferenceServiceTest, EngineErrorsMapToTheirCodes) {
  StartServer();
  std::future<grpc::Status> result = GenerateAsync(TextRequest("x"));
  auto id = engine_->WaitSubmitted(1, absl::Seconds(5));
  ASSERT_TRUE(id.has_value());
  engine_->Finish(*id, absl::ResourceExhaustedError("KV budget exhausted"),
                  engine::FinishReason::kError);
  grpc::Status s = result.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("KV budget"));
}

TEST_F(InferenceServiceTest, DrainFinishesInFlightWorkAndRefusesNewWork) {
  StartServer();
  ASSERT_EQ(Health(kReadinessService), HealthCheckResponse::SERVING);
  std::future<grpc::Status> first = GenerateAsync(TextRequest("x"));
  auto id = engine_->WaitSubmitted(1, absl::Seconds(5));
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(server_->service().inflight_generations(), 1);
  std::future<bool> drained =
      std::async(std::launch::async, [this] { return server_->Drain(absl::Seconds(20)); });
  ASSERT_TRUE(WaitReadiness(HealthCheckResponse::NOT_SERVING));
  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);  // still alive while draining
  grpc::ClientContext ctx;
  v1::GenerateResponse resp;
  EXPECT_EQ(Generate(TextRequest("y"), &resp, &ctx).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Trailer(ctx, "grpc-retry-pushback-ms"), "1000");
  // The in-flight request finishes normally.
  ASSERT_TRUE(engine_->Finish(*id, absl::OkStatus(), engine::FinishReason::kLength));
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(drained.get());
  EXPECT_EQ(server_->service().inflight_generations(), 0);
}

TEST_F(InferenceServiceTest, DrainGracePeriodCancelsWhatIsLeft) {
  StartServer();
  std::future<grpc::Status> first = GenerateAsync(TextRequest("x"));
  ASSERT_TRUE(engine_->WaitSubmitted(1, absl::Seconds(5)).has_value());
  EXPECT_FALSE(server_->Drain(absl::Milliseconds(100)));
  EXPECT_EQ(first.get().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(InferenceServiceTest, SessionsAndModelInfo) {
  StartServer();
  grpc::ClientContext c1;
  v1::OpenSessionRequest open;
  v1::Session session;
  ASSERT_TRUE(stub_->OpenSession(&c1, open, &session).ok());
  EXPECT_FALSE(session.session_id().empty());

  // A text turn carries the session id and its tokens without BOS, asking the engine
  // for one (add_bos: the engine adds it only if the history is empty). The service
  // never reads the session first.
  engine_->SetHistory(session.session_id(), 5);
  engine_->SetImmediateTokens({});
  v1::GenerateRequest turn = TextRequest("Hello");
  turn.set_session_id(session.session_id());
  v1::GenerateResponse resp;
  ASSERT_TRUE(Generate(turn, &resp).ok());
  ASSERT_EQ(engine_->submitted().size(), 1u);
  EXPECT_EQ(engine_->submitted()[0].session_id, session.session_id());
  EXPECT_NE(engine_->submitted()[0].prompt_tokens.front(), 1);
  EXPECT_TRUE(engine_->submitted()[0].add_bos);
  EXPECT_EQ(engine_->get_session_calls(), 0);

  grpc::ClientContext c2;
  v1::OpenSessionRequest bad;
  bad.mutable_ttl()->set_seconds(-5);
  EXPECT_EQ(stub_->OpenSession(&c2, bad, &session).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext c3;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&c3, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.vocab_size(), 512);
  EXPECT_EQ(info.backend(), "fake");
  EXPECT_EQ(info.max_tokens_limit(), 100);
  EXPECT_EQ(info.max_stop_strings(), 3);
  EXPECT_EQ(info.max_stop_string_bytes(), 40);
  EXPECT_EQ(info.max_stop_token_ids(), 5);
  EXPECT_EQ(info.kv_bytes_per_token(), 2 * 2 * 8 * 4);  // FakeEngine's layout: K and V, f32
  EXPECT_EQ(info.fingerprint().size(), 16u);

  grpc::ClientContext c4;
  v1::DetokenizeRequest detok;
  detok.add_token_ids(100000);
  v1::DetokenizeResponse text;
  grpc::Status s = stub_->Detokenize(&c4, detok, &text);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("token_ids"));
}

// The session id as metadata "kvserve-session-id" (for routers): OpenSession and
// ForkSession answer with it in their initial metadata; a call carrying it must name the
// same session in its body (INVALID_ARGUMENT naming the key otherwise, before the engine
// sees the call); calls without it are not checked.
TEST_F(InferenceServiceTest, SessionIdMetadataIsAnsweredAndChecked) {
  StartServer();
  auto metadata = [](const grpc::ClientContext& ctx) {
    auto it = ctx.GetServerInitialMetadata().find("kvserve-session-id");
    return it == ctx.GetServerInitialMetadata().end()
               ? std::string()
               : std::string(it->second.data(), it->second.size());
  };
  grpc::ClientContext open_ctx;
  v1::Session session;
  ASSERT_TRUE(stub_->OpenSession(&open_ctx, v1::OpenSessionRequest(), &session).ok());
  EXPECT_EQ(metadata(open_ctx), session.session_id());
  grpc::ClientContext fork_ctx;
  fork_ctx.AddMetadata("kvserve-session-id", session.session_id());
  v1::ForkSessionRequest fork;
  fork.set_parent_session_id(session.session_id());
  v1::Session child;
  ASSERT_TRUE(stub_->ForkSession(&fork_ctx, fork, &child).ok());
  EXPECT_EQ(metadata(fork_ctx), child.session_id());
  EXPECT_NE(child.session_id(), session.session_id());

  engine_->SetImmediateTokens({});
  v1::GenerateRequest turn = TextRequest("Hello");
  turn.set_session_id(session.session_id());
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("kvserve-session-id", session.session_id());
    v1::GenerateResponse resp;
    EXPECT_TRUE(Generate(turn, &resp, &ctx).ok());
  }
  // A mismatch on each kind of call: a turn (unary and streamed), a stateless request, a
  // session call; none reaches the engine.
  const size_t submitted = engine_->submitted().size();
  for (const std::string& header : {child.session_id(), std::string("s-other")}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("kvserve-session-id", header);
    v1::GenerateResponse resp;
    grpc::Status s = Generate(turn, &resp, &ctx);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("kvserve-session-id"));
    EXPECT_THAT(s.error_message(), HasSubstr("session_id"));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    ctx.AddMetadata("kvserve-session-id", child.session_id());
    auto reader = stub_->GenerateStream(&ctx, turn);
    EXPECT_EQ(ReadRest(reader.get()).text, "");
    grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("kvserve-session-id"));
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("kvserve-session-id", session.session_id());
    v1::GenerateResponse resp;
    grpc::Status s = Generate(TextRequest("stateless"), &resp, &ctx);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("stateless"));
  }
  EXPECT_EQ(engine_->submitted().size(), submitted);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("kvserve-session-id", session.session_id());
    v1::GetSessionRequest get;
    get.set_session_id(child.session_id());
    v1::Session out;
    grpc::Status s = stub_->GetSession(&ctx, get, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("kvserve-session-id"));
  }
  grpc::ClientContext close_ctx;
  close_ctx.AddMetadata("kvserve-session-id", child.session_id());
  v1::CloseSessionRequest close;
  close.set_session_id(child.session_id());
  v1::CloseSessionResponse closed;
  EXPECT_TRUE(stub_->CloseSession(&close_ctx, close, &closed).ok());
}

}  // namespace
}  // namespace kvserve::service
