// End-to-end tests of the gRPC service with the real engine and the real stories260K
// model: a Server on an ephemeral loopback port, called through the generated C++ stub.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/fake_clock.h"
#include "engine/model_loading.h"
#include "gmock/gmock.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvserve/v1/inference.grpc.pb.h"
#include "server/bearer_auth.h"
#include "service/server.h"

namespace kvserve::service {
namespace {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kPrompt[] = "Once upon a time";

std::string ModelPath() {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  return std::string(dir == nullptr ? "models" : dir) + "/stories260K.gguf";
}

std::chrono::system_clock::time_point In(absl::Duration d) {
  return std::chrono::system_clock::now() + std::chrono::microseconds(absl::ToInt64Microseconds(d));
}

class ServiceIntegrationTest : public ::testing::Test {
 protected:
  // Starts a server; attaches the real engine unless `attach` is false.
  void StartServer(bool attach = true) {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.metrics.address = "";
    options.service = service_options_;
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Inference::NewStub(channel_);
    health_ = grpc::health::v1::Health::NewStub(channel_);
    if (attach) AttachEngine();
  }

  void AttachEngine() {
    engine::ModelOptions model_options;
    model_options.model_path = ModelPath();
    model_options.backend = "cpu_blas";
    model_options.threads = 1;
    model_options.engine = engine_options_;
    model_options.engine.max_tokens_limit = 1000;
    auto loaded = engine::LoadModel(model_options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_TRUE(
        server_->Attach(std::move(loaded->model), std::move(loaded->engine), loaded->backend).ok());
  }

  static v1::GenerateRequest Greedy(const std::string& text, int max_tokens) {
    v1::GenerateRequest req;
    req.set_text(text);
    req.mutable_sampling()->set_temperature(0);
    req.set_max_tokens(max_tokens);
    return req;
  }

  // Adds "authorization: Bearer token_" to calls when token_ is set.
  void Authorize(grpc::ClientContext* ctx) const {
    if (!token_.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  }

  grpc::Status Generate(const v1::GenerateRequest& req, v1::GenerateResponse* resp,
                        absl::Duration timeout = absl::Seconds(30)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(timeout));
    Authorize(&ctx);
    return stub_->Generate(&ctx, req, resp);
  }

  // Streams `req`; returns the concatenated text (and the last message in `last`).
  grpc::Status Stream(const v1::GenerateRequest& req, std::string* text,
                      v1::GenerateStreamResponse* last, int* messages = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(30)));
    Authorize(&ctx);
    auto reader = stub_->GenerateStream(&ctx, req);
    v1::GenerateStreamResponse msg;
    int n = 0;
    while (reader->Read(&msg)) {
      *text += msg.text();
      *last = msg;
      ++n;
    }
    if (messages != nullptr) *messages = n;
    return reader->Finish();
  }

  HealthCheckResponse::ServingStatus Health(const std::string& service) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(5)));
    HealthCheckRequest req;
    req.set_service(service);
    HealthCheckResponse resp;
    if (!health_->Check(&ctx, req, &resp).ok()) return HealthCheckResponse::UNKNOWN;
    return resp.status();
  }

  // Polls engine stats until nothing runs, waits or holds blocks for a request
  // (bounded: 10 s).
  bool WaitEngineIdle() {
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (absl::Now() < end) {
      engine::EngineStats stats = server_->engine()->Stats();
      if (stats.running == 0 && stats.waiting == 0 && stats.blocks_used == 0) return true;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return false;
  }

  // A stream waiting for a flush on the fake clock is released before the server's
  // shutdown waits for it (a failed test would otherwise hang there).
  void TearDown() override {
    fake_clock_.Advance(absl::Hours(1));
    server_.reset();
  }

  // Declared first: outlives the server, which may run on it (service_options_.clock).
  common::testing::FakeClock fake_clock_;
  engine::Engine::Options engine_options_;
  InferenceService::Options service_options_;
  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  // The bearer token the helpers send (Authorize); empty = none.
  std::string token_;
};

TEST_F(ServiceIntegrationTest, GreedyUnaryMatchesStreamAndTheReferenceStory) {
  StartServer();
  v1::GenerateResponse unary;
  ASSERT_TRUE(Generate(Greedy(kPrompt, 40), &unary).ok());
  // llama2.c's greedy continuation of the prompt (DESIGN.md).
  EXPECT_THAT(unary.text(), StartsWith(", there was a little girl named Lily."));
  EXPECT_EQ(unary.usage().completion_tokens(), unary.token_ids_size());
  EXPECT_EQ(unary.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(unary.usage().completion_tokens(), 40);

  std::string streamed;
  v1::GenerateStreamResponse last;
  int messages = 0;
  ASSERT_TRUE(Stream(Greedy(kPrompt, 40), &streamed, &last, &messages).ok());
  EXPECT_EQ(streamed, unary.text());
  EXPECT_GE(messages, 2);
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().completion_tokens(), 40);
  EXPECT_EQ(last.usage().prompt_tokens(), unary.usage().prompt_tokens());

  // Token-id prompts give the same continuation as the text they encode.
  grpc::ClientContext ctx;
  v1::TokenizeRequest tok;
  tok.set_text(kPrompt);
  tok.set_add_bos(true);
  v1::TokenizeResponse ids;
  ASSERT_TRUE(stub_->Tokenize(&ctx, tok, &ids).ok());
  v1::GenerateRequest by_ids = Greedy("", 40);
  by_ids.mutable_tokens()->mutable_ids()->CopyFrom(ids.token_ids());
  v1::GenerateResponse from_ids;
  ASSERT_TRUE(Generate(by_ids, &from_ids).ok());
  EXPECT_EQ(from_ids.text(), unary.text());
}

// Tokenize reads "</s>" in the text as the control token only with parse_special.
TEST_F(ServiceIntegrationTest, TokenizeParsesControlTokensOnlyWhenAsked) {
  StartServer();
  const int32_t eos = 2;  // </s> in the stories vocabulary
  for (bool parse_special : {false, true}) {
    grpc::ClientContext ctx;
    v1::TokenizeRequest tok;
    tok.set_text("Once</s>upon");
    tok.set_parse_special(parse_special);
    v1::TokenizeResponse ids;
    ASSERT_TRUE(stub_->Tokenize(&ctx, tok, &ids).ok());
    EXPECT_EQ(std::count(ids.token_ids().begin(), ids.token_ids().end(), eos),
              parse_special ? 1 : 0)
        << "parse_special=" << parse_special;
  }
}

// Tokens produced within the flush interval after a write share the next message; the
// first token never waits, and nothing is lost or reordered. The service runs on a fake
// clock that the test moves only once the engine has finished all 64 tokens: every token
// after the first waits for it, then goes out with the finish in one message.
TEST_F(ServiceIntegrationTest, StreamFlushIntervalCoalescesAllButTheFirstToken) {
  service_options_.clock = &fake_clock_;
  service_options_.stream_flush_interval = absl::Milliseconds(300);
  StartServer();
  v1::GenerateResponse unary;
  ASSERT_TRUE(Generate(Greedy(kPrompt, 64), &unary).ok());
  // The unary call's reply leaves from inside its finish; wait until the engine has
  // counted that finish (a snapshot published after it), so the count below is exact.
  auto finished_requests = [&] { return server_->engine()->Stats().requests_finished_total; };
  for (const absl::Time end = absl::Now() + absl::Seconds(30);
       absl::Now() < end && finished_requests() < 1;) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(finished_requests(), 1);

  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(60)));
  auto reader = stub_->GenerateStream(&ctx, Greedy(kPrompt, 64));
  v1::GenerateStreamResponse msg;
  std::vector<int> tokens_per_message;
  std::vector<int32_t> ids;
  std::string text;
  auto read = [&] {
    if (!reader->Read(&msg)) return false;
    tokens_per_message.push_back(msg.token_ids_size());
    ids.insert(ids.end(), msg.token_ids().begin(), msg.token_ids().end());
    text += msg.text();
    return true;
  };
  ASSERT_TRUE(read());
  // The stream's finish is counted only after the engine handed it to the stream (its
  // sink's OnFinish returned): every token and the finish wait for the flush time then.
  // Only then does the fake clock pass the flush interval. (Moving it earlier would split
  // the tokens and leave the last message waiting for a time that never comes.)
  const absl::Time end = absl::Now() + absl::Seconds(30);
  auto finished = [&] { return finished_requests() >= 2; };
  while (absl::Now() < end && !finished()) absl::SleepFor(absl::Milliseconds(1));
  // Whatever happens below, the clock passes every pending flush, so a failure ends the
  // call instead of hanging the server's shutdown.
  fake_clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(finished());
  while (read()) {
  }
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  // The first token is not delayed; the other 63 leave together with the finish.
  EXPECT_EQ(tokens_per_message, (std::vector<int>{1, 63}));
  EXPECT_EQ(ids, std::vector<int32_t>(unary.token_ids().begin(), unary.token_ids().end()));
  EXPECT_EQ(text, unary.text());
  EXPECT_EQ(msg.usage().completion_tokens(), 64);
}

// Every field is validated once, by the engine, and comes back named by its proto path;
// nothing invalid runs.
TEST_F(ServiceIntegrationTest, InvalidFieldsAreNamedByTheirProtoPath) {
  StartServer();
  struct Case {
    std::function<void(v1::GenerateRequest*)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](auto* r) { r->mutable_sampling()->set_temperature(-0.5f); }, "sampling.temperature "},
      {[](auto* r) { r->mutable_sampling()->set_temperature(std::nanf("")); },
       "sampling.temperature "},
      {[](auto* r) { r->mutable_sampling()->set_top_p(0.0f); }, "sampling.top_p "},
      {[](auto* r) { r->mutable_sampling()->set_top_p(1.01f); }, "sampling.top_p "},
      {[](auto* r) { r->mutable_sampling()->set_top_k(-1); }, "sampling.top_k "},
      {[](auto* r) { r->mutable_sampling()->set_min_p(2); }, "sampling.min_p "},
      {[](auto* r) { r->mutable_sampling()->set_repetition_penalty(0); },
       "sampling.repetition_penalty "},
      {[](auto* r) { r->mutable_sampling()->set_frequency_penalty(3); },
       "sampling.frequency_penalty "},
      {[](auto* r) { r->mutable_sampling()->set_presence_penalty(-3); },
       "sampling.presence_penalty "},
      {[](auto* r) { r->set_max_tokens(0); }, "max_tokens "},
      {[](auto* r) { r->set_max_tokens(1001); }, "max_tokens "},
      {[](auto* r) { r->add_stop(""); }, "stop[0] "},
      {[](auto* r) { r->add_stop_token_ids(-1); }, "stop_token_ids[0] "},
      {[](auto* r) { r->set_top_logprobs(50); }, "top_logprobs "},
      {[](auto* r) {
         r->mutable_tokens()->add_ids(1);
         r->mutable_tokens()->add_ids(512);
       },
       "prompt.tokens.ids[1] "},
      {[](auto* r) { r->set_text(std::string(5000, 'x')); }, "prompt makes a context of "},
      {[](auto* r) { r->clear_text(); }, "prompt must not be empty"},
      {[](auto* r) { r->set_cache_salt(std::string(300, 's')); }, "cache_salt "},
  };
  const int64_t steps_before = server_->engine()->Stats().steps_total;
  for (const Case& c : cases) {
    v1::GenerateRequest req = Greedy(kPrompt, 4);
    c.mutate(&req);
    v1::GenerateResponse resp;
    grpc::Status s = Generate(req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_THAT(s.error_message(), StartsWith(c.field));
  }
  EXPECT_EQ(server_->engine()->Stats().steps_total, steps_before);

  // A session's history counts against the context: 2000 tokens of history leave no
  // room for a 60-token turn in stories260K's 2048 (checked before the session's own
  // history limit, which defaults to the context length).
  grpc::ClientContext open_ctx;
  v1::Session session;
  ASSERT_TRUE(stub_->OpenSession(&open_ctx, v1::OpenSessionRequest(), &session).ok());
  v1::GenerateRequest first = Greedy(kPrompt, 1);
  first.set_session_id(session.session_id());
  first.clear_text();
  for (int i = 0; i < 1999; ++i) first.mutable_tokens()->add_ids(300);
  v1::GenerateResponse resp;
  ASSERT_TRUE(Generate(first, &resp).ok());
  v1::GenerateRequest turn = Greedy(kPrompt, 4);
  turn.set_session_id(session.session_id());
  turn.clear_text();
  for (int i = 0; i < 60; ++i) turn.mutable_tokens()->add_ids(300);
  grpc::Status s = Generate(turn, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("prompt makes a context of"));
  EXPECT_THAT(s.error_message(), HasSubstr("2060 tokens (2000 of them session history)"));
}

TEST(ServerOptionsTest, StreamFlushIntervalMustBeWithinBounds) {
  for (absl::Duration bad : {absl::Milliseconds(-1), absl::Seconds(2)}) {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.metrics.address = "";
    options.service.stream_flush_interval = bad;
    auto server = Server::Start(options);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(server.status().message()), HasSubstr("stream-flush-interval"));
  }
}

TEST_F(ServiceIntegrationTest, SessionTurnTwoReportsCachedTokens) {
  StartServer();
  grpc::ClientContext ctx;
  v1::Session session;
  ASSERT_TRUE(stub_->OpenSession(&ctx, v1::OpenSessionRequest(), &session).ok());

  v1::GenerateRequest turn1 = Greedy(kPrompt, 30);
  turn1.set_session_id(session.session_id());
  v1::GenerateResponse r1;
  ASSERT_TRUE(Generate(turn1, &r1).ok());
  EXPECT_EQ(r1.usage().cached_tokens_local(), 0);

  v1::GenerateRequest turn2 = Greedy(" She was happy.", 10);
  turn2.set_session_id(session.session_id());
  v1::GenerateResponse r2;
  ASSERT_TRUE(Generate(turn2, &r2).ok());
  // Turn 2 starts from turn 1's whole history; its full blocks come from the cache.
  EXPECT_GT(r2.usage().prompt_tokens(),
            r1.usage().prompt_tokens() + r1.usage().completion_tokens());
  EXPECT_GE(r2.usage().cached_tokens_local(), 16);
  EXPECT_EQ(r2.usage().computed_tokens(), r2.usage().prompt_tokens() -
                                              r2.usage().cached_tokens_local() -
                                              r2.usage().cached_tokens_remote());

  grpc::ClientContext get_ctx;
  v1::GetSessionRequest get;
  get.set_session_id(session.session_id());
  v1::Session info;
  ASSERT_TRUE(stub_->GetSession(&get_ctx, get, &info).ok());
  EXPECT_GT(info.history_tokens(), r1.usage().prompt_tokens());

  grpc::ClientContext close_ctx;
  v1::CloseSessionRequest close;
  close.set_session_id(session.session_id());
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(stub_->CloseSession(&close_ctx, close, &closed).ok());
  v1::GenerateResponse r3;
  EXPECT_EQ(Generate(turn2, &r3).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceIntegrationTest, ExpiredSessionIsNotFound) {
  StartServer();
  grpc::ClientContext ctx;
  v1::OpenSessionRequest open;
  open.mutable_ttl()->set_nanos(1000000);  // 1 ms
  v1::Session session;
  ASSERT_TRUE(stub_->OpenSession(&ctx, open, &session).ok());
  absl::SleepFor(absl::Milliseconds(20));  // outlive the TTL (real clock in this test)
  v1::GenerateRequest turn = Greedy(kPrompt, 5);
  turn.set_session_id(session.session_id());
  v1::GenerateResponse resp;
  EXPECT_EQ(Generate(turn, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceIntegrationTest, CancellationMidStreamFreesTheRequest) {
  StartServer();
  grpc::ClientContext ctx;
  v1::GenerateRequest req = Greedy(kPrompt, 450);
  req.set_ignore_eos(true);
  auto reader = stub_->GenerateStream(&ctx, req);
  v1::GenerateStreamResponse msg;
  ASSERT_TRUE(reader->Read(&msg));  // generation is under way
  ctx.TryCancel();
  while (reader->Read(&msg)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitEngineIdle());
}

TEST_F(ServiceIntegrationTest, ExpiredDeadlineIsDeadlineExceeded) {
  StartServer();
  v1::GenerateRequest req = Greedy(kPrompt, 450);
  req.set_ignore_eos(true);
  v1::GenerateResponse resp;
  // Far shorter than 450 tokens take: the deadline passes mid-generation.
  EXPECT_EQ(Generate(req, &resp, absl::Milliseconds(5)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  // Already expired on arrival.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() - std::chrono::seconds(1));
  EXPECT_EQ(stub_->Generate(&ctx, req, &resp).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(WaitEngineIdle());
}

TEST_F(ServiceIntegrationTest, FullQueueIsResourceExhaustedWithRetryHint) {
  engine_options_.max_running_sequences = 1;
  engine_options_.max_waiting_requests = 1;
  StartServer();
  constexpr int kClients = 8;
  std::vector<std::thread> clients;
  std::vector<grpc::Status> statuses(kClients);
  std::vector<std::string> pushback(kClients);
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      v1::GenerateRequest req = Greedy(kPrompt, 400);
      req.set_ignore_eos(true);
      grpc::ClientContext ctx;
      ctx.set_deadline(In(absl::Seconds(60)));
      v1::GenerateResponse resp;
      statuses[i] = stub_->Generate(&ctx, req, &resp);
      auto it = ctx.GetServerTrailingMetadata().find("grpc-retry-pushback-ms");
      if (it != ctx.GetServerTrailingMetadata().end()) {
        pushback[i] = std::string(it->second.data(), it->second.size());
      }
    });
  }
  for (auto& t : clients) t.join();
  int ok = 0, exhausted = 0;
  for (int i = 0; i < kClients; ++i) {
    if (statuses[i].ok()) {
      ++ok;
    } else {
      EXPECT_EQ(statuses[i].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << statuses[i].error_message();
      EXPECT_EQ(pushback[i], "1000");
      ++exhausted;
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(exhausted, 1);
}

TEST_F(ServiceIntegrationTest, EveryValidationErrorNamesItsField) {
  StartServer();
  auto expect_invalid = [&](v1::GenerateRequest req, const std::string& field) {
    v1::GenerateResponse resp;
    grpc::Status s = Generate(req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_THAT(s.error_message(), StartsWith(field));
  };
  v1::GenerateRequest r = Greedy(kPrompt, 5);
  r.mutable_sampling()->set_temperature(-1);
  expect_invalid(r, "sampling.temperature");
  r = Greedy(kPrompt, 5);
  r.mutable_sampling()->set_temperature(std::nanf(""));
  expect_invalid(r, "sampling.temperature");
  r = Greedy(kPrompt, 5);
  r.mutable_sampling()->set_top_p(0);
  expect_invalid(r, "sampling.top_p");
  r = Greedy(kPrompt, 5);
  r.mutable_sampling()->set_top_p(1.5f);
  expect_invalid(r, "sampling.top_p");
  expect_invalid(Greedy(kPrompt, 0), "max_tokens");
  expect_invalid(Greedy(kPrompt, 1001), "max_tokens");
  r = Greedy("", 5);
  r.mutable_tokens()->add_ids(1);
  r.mutable_tokens()->add_ids(512);  // vocab is 512
  expect_invalid(r, "prompt.tokens.ids[1]");
  grpc::ClientContext info_ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&info_ctx, v1::GetModelInfoRequest(), &info).ok());
  ASSERT_GT(info.context_length(), 0);
  r = Greedy("", 5);
  for (int i = 0; i < info.context_length(); ++i) r.mutable_tokens()->add_ids(100);
  expect_invalid(r, "prompt");
  std::string long_text;  // 4+ tokens per repetition
  for (int i = 0; i < info.context_length() / 4 + 1; ++i) long_text += " Once upon a time";
  expect_invalid(Greedy(long_text, 5), "prompt");

  v1::GenerateRequest unknown = Greedy(kPrompt, 5);
  unknown.set_session_id("no-such-session");
  v1::GenerateResponse resp;
  EXPECT_EQ(Generate(unknown, &resp).error_code(), grpc::StatusCode::NOT_FOUND);

  // Garbage bytes where a message belongs: the server answers, it does not crash.
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(5)));
  grpc::Slice garbage(std::string("\xff\xff\xff\xff\x0f garbage", 13));
  grpc::ByteBuffer request(&garbage, 1), response;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/kvserve.v1.Inference/Generate", grpc::StubOptions(), &request,
                    &response, [&done](grpc::Status s) { done.set_value(s); });
  grpc::Status garbage_status = done.get_future().get();
  EXPECT_FALSE(garbage_status.ok());
  v1::GenerateResponse after;
  EXPECT_TRUE(Generate(Greedy(kPrompt, 3), &after).ok());
}

TEST_F(ServiceIntegrationTest, HealthGoesNotServingServingNotServing) {
  StartServer(/*attach=*/false);
  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(kReadinessService), HealthCheckResponse::NOT_SERVING);
  AttachEngine();
  EXPECT_EQ(Health(kReadinessService), HealthCheckResponse::SERVING);

  // A long generation is in flight while the server drains.
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(30)));
  v1::GenerateRequest req = Greedy(kPrompt, 450);
  req.set_ignore_eos(true);
  auto reader = stub_->GenerateStream(&ctx, req);
  v1::GenerateStreamResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  std::future<bool> drained =
      std::async(std::launch::async, [this] { return server_->Drain(absl::Seconds(20)); });
  bool saw_not_serving = false;
  for (const absl::Time end = absl::Now() + absl::Seconds(5); absl::Now() < end;) {
    if (Health(kReadinessService) == HealthCheckResponse::NOT_SERVING) {
      saw_not_serving = true;
      break;
    }
  }
  EXPECT_TRUE(saw_not_serving);
  std::string rest;
  while (reader->Read(&msg)) rest += msg.text();
  EXPECT_TRUE(reader->Finish().ok());  // the in-flight stream completed
  EXPECT_EQ(msg.usage().completion_tokens(), 450);
  EXPECT_TRUE(drained.get());
}

TEST_F(ServiceIntegrationTest, MetricsCountGenerationsAndReadEngineStats) {
  StartServer();
  v1::GenerateResponse resp;
  ASSERT_TRUE(Generate(Greedy(kPrompt, 12), &resp).ok());
  // The reply can overtake the engine's count of its last step (counted when the step
  // returns, after the request finished inside it): wait for it, 5 s at most.
  for (const absl::Time end = absl::Now() + absl::Seconds(5);
       absl::Now() < end && server_->engine()->Stats().steps_total < 12;) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const std::string text = server_->metrics().SerializeText();
  EXPECT_THAT(text, HasSubstr("kvserve_request_generated_tokens_total 12"));
  EXPECT_THAT(
      text,
      HasSubstr("kvserve_rpc_requests_total{code=\"ok\",method=\"Generate\",protocol=\"grpc\"} 1"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_time_to_first_token_seconds_count 1"));
  EXPECT_THAT(text, HasSubstr("kvserve_kv_blocks_free "));
  EXPECT_THAT(text, HasSubstr("kvserve_engine_requests_running 0"));
  // The values, not just the names: BOS + 4 prompt tokens, one prefill step and 11 decode
  // steps; 16 of the 17 positions were computed, so one full block stays cached and
  // nothing is in use afterwards.
  for (const char* line :
       {"\nkvserve_request_prompt_tokens_total 5\n", "\nkvserve_request_computed_tokens_total 5\n",
        "\nkvserve_request_queue_time_seconds_count 1\n",
        "\nkvserve_request_e2e_latency_seconds_count 1\n", "\nkvserve_engine_steps_total 12\n",
        "\nkvserve_kv_blocks_used 0\n", "\nkvserve_kv_blocks_cached 1\n",
        "\nkvserve_engine_preemptions_total 0\n", "\nkvserve_kv_blocks_session 0\n"}) {
    EXPECT_THAT(text, HasSubstr(line)) << line;
  }
}

// Lists the services through grpc.reflection.v1alpha.ServerReflection with a generic
// bidi call (the reflection protos are not installed; the few fields needed are
// encoded and decoded by hand: request field 7 list_services, response field 6
// list_services_response { repeated service = 1 { name = 1 } }).
std::vector<std::string> ListServicesByReflection(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(10)));
  std::vector<std::string> names;
  auto next = [&cq](void* want) {
    void* tag = nullptr;
    bool ok = false;
    return cq.Next(&tag, &ok) && tag == want && ok;
  };
  int tag = 0;
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  call->StartCall(&tag);
  if (!next(&tag)) return names;
  const std::string request_bytes("\x3a\x00", 2);  // list_services: ""
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, &tag);
  if (!next(&tag)) return names;
  call->WritesDone(&tag);
  if (!next(&tag)) return names;
  grpc::ByteBuffer response;
  call->Read(&response, &tag);
  const bool got = next(&tag);
  grpc::Status status;
  call->Finish(&status, &tag);
  next(&tag);
  if (!got) return names;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return names;
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  google::protobuf::UnknownFieldSet top;
  if (!top.ParseFromString(bytes)) return names;
  for (int i = 0; i < top.field_count(); ++i) {
    if (top.field(i).number() != 6) continue;
    google::protobuf::UnknownFieldSet list;
    if (!list.ParseFromString(top.field(i).length_delimited())) continue;
    for (int j = 0; j < list.field_count(); ++j) {
      google::protobuf::UnknownFieldSet service;
      if (list.field(j).number() != 1 || !service.ParseFromString(list.field(j).length_delimited()))
        continue;
      for (int k = 0; k < service.field_count(); ++k) {
        if (service.field(k).number() == 1) names.push_back(service.field(k).length_delimited());
      }
    }
  }
  return names;
}

TEST_F(ServiceIntegrationTest, ReflectionListsTheServices) {
  StartServer();
  EXPECT_THAT(ListServicesByReflection(channel_),
              ::testing::IsSupersetOf({std::string("kvserve.v1.Inference"),
                                       std::string("grpc.health.v1.Health"),
                                       std::string("grpc.reflection.v1alpha.ServerReflection")}));
}

// --auth-tokens: tenants "alice" and "bob".
class ServiceAuthTest : public ServiceIntegrationTest {
 protected:
  void StartWithAuth() {
    absl::StatusOr<server::BearerAuth> auth =
        server::BearerAuth::Parse("# tenants\ntoken-a alice\ntoken-b bob\n");
    ASSERT_TRUE(auth.ok()) << auth.status();
    service_options_.auth = *std::move(auth);
    StartServer();
  }

  grpc::Status Open(v1::Session* session) {
    grpc::ClientContext ctx;
    Authorize(&ctx);
    return stub_->OpenSession(&ctx, v1::OpenSessionRequest(), session);
  }

  // Every call that names session `id`, as the current token_; their statuses in order
  // GetSession, ForkSession, Generate turn, GenerateStream turn, CloseSession.
  std::vector<grpc::Status> CallsOn(const std::string& id) {
    std::vector<grpc::Status> out;
    {
      grpc::ClientContext ctx;
      Authorize(&ctx);
      v1::GetSessionRequest req;
      req.set_session_id(id);
      v1::Session resp;
      out.push_back(stub_->GetSession(&ctx, req, &resp));
    }
    {
      grpc::ClientContext ctx;
      Authorize(&ctx);
      v1::ForkSessionRequest req;
      req.set_parent_session_id(id);
      v1::Session resp;
      out.push_back(stub_->ForkSession(&ctx, req, &resp));
    }
    v1::GenerateRequest turn = Greedy(kPrompt, 3);
    turn.set_session_id(id);
    v1::GenerateResponse resp;
    out.push_back(Generate(turn, &resp));
    std::string text;
    v1::GenerateStreamResponse last;
    out.push_back(Stream(turn, &text, &last));
    {
      grpc::ClientContext ctx;
      Authorize(&ctx);
      v1::CloseSessionRequest req;
      req.set_session_id(id);
      v1::CloseSessionResponse closed;
      out.push_back(stub_->CloseSession(&ctx, req, &closed));
    }
    return out;
  }
};

TEST_F(ServiceAuthTest, EveryInferenceCallNeedsAListedTokenButHealthAndReflectionDoNot) {
  StartWithAuth();
  for (const std::string& token :
       {std::string(""), std::string("token-c"), std::string("token-a "), std::string("token-")}) {
    SCOPED_TRACE(token);
    token_ = token;
    v1::GenerateResponse resp;
    EXPECT_EQ(Generate(Greedy(kPrompt, 3), &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    std::string text;
    v1::GenerateStreamResponse last;
    EXPECT_EQ(Stream(Greedy(kPrompt, 3), &text, &last).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_TRUE(text.empty());
    v1::Session session;
    EXPECT_EQ(Open(&session).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext ctx;
    Authorize(&ctx);
    v1::ModelInfo info;
    EXPECT_EQ(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    for (const grpc::Status& status : CallsOn("s-0123456789abcdef0123456789abcdef")) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    }
  }
  // A token sent without the "Bearer " scheme is not accepted either.
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "token-a");
    v1::ModelInfo info;
    EXPECT_EQ(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_THAT(server_->metrics().SerializeText(),
              HasSubstr("code=\"unauthenticated\",method=\"Generate\",protocol=\"grpc\"} 8"));

  // Probes and tools need no token.
  token_.clear();
  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(kReadinessService), HealthCheckResponse::SERVING);
  EXPECT_THAT(ListServicesByReflection(channel_), ::testing::Contains("kvserve.v1.Inference"));

  token_ = "token-b";
  v1::GenerateResponse resp;
  ASSERT_TRUE(Generate(Greedy(kPrompt, 3), &resp).ok());
  EXPECT_EQ(resp.usage().completion_tokens(), 3);
}

TEST_F(ServiceAuthTest, AnotherTenantsSessionIsNotFoundLikeAnUnknownId) {
  StartWithAuth();
  token_ = "token-a";
  v1::Session session;
  ASSERT_TRUE(Open(&session).ok());
  const std::string id = session.session_id();
  const std::string unknown = "s-0123456789abcdef0123456789abcdef";

  token_ = "token-b";
  const std::vector<grpc::Status> unknown_calls = CallsOn(unknown);
  const std::vector<grpc::Status> foreign_calls = CallsOn(id);
  ASSERT_EQ(foreign_calls.size(), unknown_calls.size());
  for (size_t i = 0; i < foreign_calls.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(foreign_calls[i].error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(unknown_calls[i].error_code(), grpc::StatusCode::NOT_FOUND);
    // Identical but for the id the caller sent.
    std::string message = foreign_calls[i].error_message();
    const size_t at = message.find(id);
    ASSERT_NE(at, std::string::npos) << message;
    message.replace(at, id.size(), unknown);
    EXPECT_EQ(message, unknown_calls[i].error_message());
  }

  // The owner's session is untouched (bob's CloseSession did not close it).
  token_ = "token-a";
  const std::vector<grpc::Status> own_calls = CallsOn(id);
  for (const grpc::Status& status : own_calls) EXPECT_TRUE(status.ok()) << status.error_message();
}

// Same prompt, same cache_salt: KV is shared within a tenant, never across tenants.
TEST_F(ServiceAuthTest, CacheSaltIsDerivedFromTheTenant) {
  StartWithAuth();
  v1::GenerateRequest req = Greedy(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends.",
      2);
  req.set_cache_salt("shared");
  v1::GenerateResponse resp;

  token_ = "token-a";
  ASSERT_TRUE(Generate(req, &resp).ok());
  ASSERT_GE(resp.usage().prompt_tokens(), 32);
  EXPECT_EQ(resp.usage().cached_tokens_local(), 0);
  ASSERT_TRUE(WaitEngineIdle());
  ASSERT_TRUE(Generate(req, &resp).ok());
  EXPECT_GE(resp.usage().cached_tokens_local(), 16);  // alice again: her KV

  token_ = "token-b";
  ASSERT_TRUE(WaitEngineIdle());
  ASSERT_TRUE(Generate(req, &resp).ok());
  EXPECT_EQ(resp.usage().cached_tokens_local(), 0);  // bob: not alice's KV
  // Nor with a salt that spells alice's derived one.
  v1::GenerateRequest spoof = req;
  spoof.set_cache_salt(std::string("alice\0shared", 12));
  ASSERT_TRUE(WaitEngineIdle());
  ASSERT_TRUE(Generate(spoof, &resp).ok());
  EXPECT_EQ(resp.usage().cached_tokens_local(), 0);
  ASSERT_TRUE(WaitEngineIdle());
  ASSERT_TRUE(Generate(req, &resp).ok());
  EXPECT_GE(resp.usage().cached_tokens_local(), 16);  // bob again: his own KV
}

TEST_F(ServiceAuthTest, PerTenantSessionLimit) {
  engine_options_.max_sessions_per_tenant = 2;
  StartWithAuth();
  token_ = "token-a";
  v1::Session session;
  ASSERT_TRUE(Open(&session).ok());
  ASSERT_TRUE(Open(&session).ok());
  const std::string second = session.session_id();
  const grpc::Status full = Open(&session);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(full.error_message(), HasSubstr("max_sessions_per_tenant 2"));
  // A fork would be a third session too.
  const std::vector<grpc::Status> calls = CallsOn(second);
  EXPECT_EQ(calls[1].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // calls[4] closed one: there is room again.
  EXPECT_TRUE(calls[4].ok());
  EXPECT_TRUE(Open(&session).ok());

  token_ = "token-b";
  EXPECT_TRUE(Open(&session).ok());
}

}  // namespace
}  // namespace kvserve::service
