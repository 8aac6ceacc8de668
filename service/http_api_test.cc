// The HTTP front (service/http_api.h) over a real Server and socket with a scripted fake
// engine: routing, admission, errors with their statuses, non-streamed and streamed
// answers, a disconnect that cancels, overload and drain. Runs under ASan and TSan (the
// sinks resume connections from the engine's thread). The official client drives a real
// kvserve in tests/openai_client_test.py.
#include "service/http_api.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/field_error.h"
#include "engine/testing/stories_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "service/server.h"
#include "service/testing/fake_engine.h"

namespace kvserve::service {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// A blocking HTTP/1.1 client on one connection.
class Connection {
 public:
  explicit Connection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv = {.tv_sec = 10, .tv_usec = 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Connection() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool ok() const { return ok_; }

  void Send(const std::string& method, const std::string& path, const std::string& body = "",
            const std::string& headers = "") {
    const std::string request = absl::StrCat(
        method, " ", path, " HTTP/1.1\r\nHost: t\r\n", headers,
        body.empty() && method == "GET"
            ? std::string()
            : absl::StrCat("Content-Type: application/json\r\nContent-Length: ", body.size(),
                           "\r\n"),
        "\r\n", body);
    ASSERT_EQ(write(fd_, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  }
  // Reads until `needle` is in what was received (or the peer closes / 10 s pass).
  std::string ReadUntil(const std::string& needle) {
    char buf[4096];
    while (received_.find(needle) == std::string::npos) {
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n <= 0) break;
      received_.append(buf, n);
    }
    return received_;
  }
  // One whole response with a Content-Length body: {status, headers, body}.
  struct Response {
    int status = 0;
    std::string head;
    std::string body;
  };
  Response ReadResponse() {
    ReadUntil("\r\n\r\n");
    Response r;
    const size_t end = received_.find("\r\n\r\n");
    if (end == std::string::npos) return r;
    r.head = received_.substr(0, end);
    r.status = std::atoi(r.head.c_str() + 9);
    const size_t cl = r.head.find("Content-Length: ");
    const size_t length = cl == std::string::npos ? 0 : std::atoi(r.head.c_str() + cl + 16);
    while (received_.size() < end + 4 + length) {
      char buf[4096];
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n <= 0) break;
      received_.append(buf, n);
    }
    r.body = received_.substr(end + 4, length);
    received_.erase(0, end + 4 + length);
    return r;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::string received_;
};

constexpr char kChat[] =
    R"({"model": "stories", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5)";

class HttpApiTest : public ::testing::Test {
 protected:
  void StartServer(bool attach = true) {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.metrics.address = "";
    options.chat_template = "chatml";
    options.service.limits.default_max_tokens = 10;
    options.service.auth = auth_;
    HttpApiOptions http;
    http.daemon.address = "127.0.0.1:0";
    http.served_model_name = "stories";
    http.max_body_bytes = 64 << 10;
    options.http = http;
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    if (!attach) return;
    auto engine = std::make_unique<testing::FakeEngine>();
    engine->SetSubmitLimits({.max_tokens_limit = 100});
    engine_ = engine.get();
    auto stories = engine::testing::LoadStories260K();
    ASSERT_TRUE(stories.ok()) << stories.status();
    ASSERT_TRUE(server_->Attach(std::move(stories->model), std::move(engine), "fake").ok());
  }
  void TearDown() override { server_.reset(); }

  Connection::Response Call(const std::string& method, const std::string& path,
                            const std::string& body = "", const std::string& headers = "") {
    Connection c(server_->http_port());
    EXPECT_TRUE(c.ok());
    c.Send(method, path, body, headers);
    return c.ReadResponse();
  }
  static Json Error(const Connection::Response& r) {
    Json j = Json::parse(r.body, nullptr, false);
    EXPECT_TRUE(j.contains("error")) << r.body;
    return j.contains("error") ? j["error"] : Json();
  }
  // The metrics text once it holds `needle`, or after 10 s without it. A request's
  // kvserve_rpc_requests_total sample is recorded when libmicrohttpd reports the exchange
  // completed, which may come after the client has read the whole answer.
  std::string MetricsOnceHolding(const std::string& needle) {
    const absl::Time end = absl::Now() + absl::Seconds(10);
    std::string text = server_->metrics().SerializeText();
    while (text.find(needle) == std::string::npos && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(10));
      text = server_->metrics().SerializeText();
    }
    return text;
  }

  std::optional<server::BearerAuth> auth_;
  std::unique_ptr<Server> server_;
  testing::FakeEngine* engine_ = nullptr;
};

TEST_F(HttpApiTest, ModelsHealthAndRouting) {
  StartServer();
  auto models = Call("GET", "/v1/models");
  EXPECT_EQ(models.status, 200);
  EXPECT_EQ(Json::parse(models.body)["data"][0]["id"], "stories");
  EXPECT_EQ(Call("GET", "/v1/models/stories").status, 200);
  auto other = Call("GET", "/v1/models/gpt-4");
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(Error(other)["code"], "model_not_found");
  EXPECT_EQ(Call("GET", "/health").status, 200);
  auto unknown = Call("GET", "/v2/nothing");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(Error(unknown)["code"], "not_found");
  auto wrong = Call("GET", "/v1/chat/completions");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_THAT(wrong.head, HasSubstr("Allow: POST"));
}

TEST_F(HttpApiTest, NotReadyUntilAttachedAndDuringDrain) {
  StartServer(/*attach=*/false);
  EXPECT_EQ(Call("GET", "/health").status, 503);
  auto loading = Call("POST", "/v1/chat/completions", absl::StrCat(kChat, "}"));
  EXPECT_EQ(loading.status, 503);
  EXPECT_THAT(loading.head, HasSubstr("Retry-After: 1"));
  EXPECT_EQ(Error(loading)["type"], "server_error");
}

TEST_F(HttpApiTest, ErrorsNameTheParameter) {
  StartServer();
  auto bad = Call(
      "POST", "/v1/chat/completions",
      R"({"model": "stories", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Error(bad)["param"], "temperature");
  EXPECT_EQ(Error(bad)["type"], "invalid_request_error");
  // The engine's field errors come back under the OpenAI name.
  engine_->FailNextSubmit(engine::FieldError("sampling.max_tokens", "must be <= 100, got 1000"));
  auto too_many = Call("POST", "/v1/chat/completions", absl::StrCat(kChat, "}"));
  EXPECT_EQ(too_many.status, 400) << too_many.body;
  EXPECT_EQ(Error(too_many)["param"], "max_tokens") << too_many.body;
  auto json = Call("POST", "/v1/completions", "{not json");
  EXPECT_EQ(json.status, 400);
  EXPECT_EQ(Error(json)["code"], "invalid_json");
  auto model = Call("POST", "/v1/chat/completions",
                    R"({"model": "x", "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(Error(model)["param"], "model");
  auto large = Call(
      "POST", "/v1/completions",
      absl::StrCat(R"({"model": "stories", "prompt": ")", std::string(70 << 10, 'a'), R"("})"));
  EXPECT_EQ(large.status, 413);
  EXPECT_EQ(Error(large)["code"], "request_too_large");
  auto session_n = Call("POST", "/v1/chat/completions",
                        absl::StrCat(kChat, R"(, "n": 2, "session_id": "s-1"})"));
  EXPECT_EQ(session_n.status, 400);
  EXPECT_EQ(Error(session_n)["param"], "n");
  engine_->FailNextSubmit(absl::ResourceExhaustedError("queue full"));
  auto busy = Call("POST", "/v1/chat/completions", absl::StrCat(kChat, "}"));
  EXPECT_EQ(busy.status, 429);
  EXPECT_THAT(busy.head, HasSubstr("Retry-After: 1"));
  EXPECT_EQ(Error(busy)["code"], "rate_limit_exceeded");
  const std::string invalid =
      "kvserve_rpc_requests_total{code=\"invalid_argument\",method=\"chat.completions\","
      "protocol=\"http\"} 3";
  const std::string metrics = MetricsOnceHolding(invalid);
  EXPECT_THAT(metrics, HasSubstr(invalid));
  EXPECT_THAT(metrics, HasSubstr("kvserve_http_requests_total{status=\"429\"} 1"));
}

TEST_F(HttpApiTest, BearerTokensAsForGrpc) {
  auto auth = server::BearerAuth::Parse("secret alice\n");
  ASSERT_TRUE(auth.ok());
  auth_ = *auth;
  StartServer();
  auto none = Call("GET", "/v1/models");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(Error(none)["code"], "invalid_api_key");
  EXPECT_EQ(Call("GET", "/v1/models", "", "Authorization: Bearer wrong\r\n").status, 401);
  EXPECT_EQ(Call("GET", "/v1/models", "", "Authorization: Bearer secret\r\n").status, 200);
  EXPECT_EQ(Call("GET", "/health").status, 200);  // probes need no token
  // Refused on its headers: the body is never read.
  auto post = Call("POST", "/v1/chat/completions", absl::StrCat(kChat, "}"),
                   "Authorization: Bearer wrong\r\n");
  EXPECT_EQ(post.status, 401);
  EXPECT_TRUE(engine_->submitted().empty());
  // The tenant reaches the engine as for gRPC.
  Connection c(server_->http_port());
  c.Send("POST", "/v1/chat/completions", absl::StrCat(kChat, "}"),
         "Authorization: Bearer secret\r\n");
  auto id = engine_->WaitSubmitted(1, absl::Seconds(10));
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(engine_->submitted()[0].tenant, "alice");
  engine_->Finish(*id, absl::OkStatus(), engine::FinishReason::kStop);
  EXPECT_EQ(c.ReadResponse().status, 200);
}

TEST_F(HttpApiTest, NonStreamedAnswerWaitsForTheEngine) {
  StartServer();
  Connection c(server_->http_port());
  c.Send("POST", "/v1/chat/completions", absl::StrCat(kChat, R"(, "n": 2, "seed": 5})"));
  auto first = engine_->WaitSubmitted(1, absl::Seconds(10));
  auto second = engine_->WaitSubmitted(2, absl::Seconds(10));
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_EQ(engine_->submitted()[1].sampling.seed, 6u);  // choice i: seed + i
  ASSERT_TRUE(engine_->Emit(*first, 7, "Hello"));
  ASSERT_TRUE(engine_->Emit(*second, 8, "Bye"));
  ASSERT_TRUE(engine_->Finish(*first, absl::OkStatus(), engine::FinishReason::kStop));
  ASSERT_TRUE(engine_->Finish(*second, absl::OkStatus(), engine::FinishReason::kLength));
  auto r = c.ReadResponse();
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = Json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][1]["message"]["content"], "Bye");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  EXPECT_TRUE(j["usage"].contains("prompt_tokens_details"));
}

TEST_F(HttpApiTest, StreamDeliversTokensAsTheyArriveThenDone) {
  StartServer();
  Connection c(server_->http_port());
  c.Send(
      "POST", "/v1/completions",
      R"({"model": "stories", "prompt": "Once", "stream": true, "stream_options": {"include_usage": true}})");
  auto id = engine_->WaitSubmitted(1, absl::Seconds(10));
  ASSERT_TRUE(id.has_value());
  ASSERT_TRUE(engine_->Emit(*id, 7, " upon"));
  // The first token is out before the request finishes.
  EXPECT_THAT(c.ReadUntil("upon"), HasSubstr("text/event-stream"));
  ASSERT_TRUE(engine_->Emit(*id, 8, " a time"));
  ASSERT_TRUE(engine_->Finish(*id, absl::OkStatus(), engine::FinishReason::kLength));
  const std::string all = c.ReadUntil("data: [DONE]");
  EXPECT_THAT(all, HasSubstr(R"("text":" a time")"));
  EXPECT_THAT(all, HasSubstr(R"("finish_reason":"length")"));
  EXPECT_THAT(all, HasSubstr(R"("choices":[],)"));  // the usage chunk
  EXPECT_THAT(all, HasSubstr("data: [DONE]"));
}

TEST_F(HttpApiTest, DisconnectMidStreamCancelsTheGeneration) {
  StartServer();
  auto c = std::make_unique<Connection>(server_->http_port());
  c->Send("POST", "/v1/chat/completions", absl::StrCat(kChat, R"(, "stream": true})"));
  auto id = engine_->WaitSubmitted(1, absl::Seconds(10));
  ASSERT_TRUE(id.has_value());
  ASSERT_TRUE(engine_->Emit(*id, 7, "Hello"));
  c->ReadUntil("Hello");
  c.reset();  // the client goes away
  // The next token's write fails and cancels the request.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (absl::Now() < end && engine_->cancelled().empty()) {
    engine_->Emit(*id, 8, " more");
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(engine_->cancelled().size(), 1u);
  EXPECT_TRUE(engine_->WaitReleased(*id, absl::Seconds(10)));
  const std::string cancelled =
      "kvserve_rpc_requests_total{code=\"cancelled\",method=\"chat.completions\","
      "protocol=\"http\"} 1";
  EXPECT_THAT(MetricsOnceHolding(cancelled), HasSubstr(cancelled));
}

TEST_F(HttpApiTest, DisconnectWhileWaitingCancelsTheGeneration) {
  StartServer();
  auto c = std::make_unique<Connection>(server_->http_port());
  c->Send("POST", "/v1/chat/completions", absl::StrCat(kChat, "}"));  // not streamed
  auto id = engine_->WaitSubmitted(1, absl::Seconds(10));
  ASSERT_TRUE(id.has_value());
  c.reset();  // gone before any answer: noticed on the suspended connection
  EXPECT_TRUE(engine_->WaitReleased(*id, absl::Seconds(10)));
  EXPECT_EQ(engine_->cancelled().size(), 1u);
}

TEST_F(HttpApiTest, DrainAnswersInFlightRequests) {
  StartServer();
  Connection c(server_->http_port());
  c.Send("POST", "/v1/chat/completions", absl::StrCat(kChat, "}"));
  ASSERT_TRUE(engine_->WaitSubmitted(1, absl::Seconds(10)).has_value());
  // The grace period passes; the engine's shutdown cancels what is left, answered 503.
  EXPECT_FALSE(server_->Drain(absl::Milliseconds(100)));
  auto r = c.ReadResponse();
  EXPECT_EQ(r.status, 503) << r.body;
}

}  // namespace
}  // namespace kvserve::service
