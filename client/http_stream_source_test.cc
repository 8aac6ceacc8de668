// HttpStreamSource over libcurl against a scripted HTTP/1.1 server on a loopback port:
// the model lookup, a streamed call's pieces and status, keep-alive reuse, error answers
// with their retry hints, a stream cut short, and cancellation.
#include "client/http_stream_source.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::client::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// One request as the server read it.
struct SeenRequest {
  std::string head;  // request line and headers
  std::string body;
};

// Serves one connection at a time on 127.0.0.1:0; each request on it is answered with the
// bytes `respond` returns (an empty answer: keep the connection open without answering
// until the client closes it).
class ScriptedServer {
 public:
  explicit ScriptedServer(std::function<std::string(const SeenRequest&)> respond)
      : respond_(std::move(respond)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 8), 0);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedServer() {
    shutdown(listen_fd_, SHUT_RDWR);
    // A connection the client keeps open (keep-alive) ends too.
    if (const int fd = connection_fd_.load(); fd >= 0) shutdown(fd, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
  }

  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }
  int connections() const { return connections_.load(); }
  std::vector<SeenRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Serve() {
    for (;;) {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      connection_fd_ = fd;
      ++connections_;
      std::string buffer;
      SeenRequest request;
      while (ReadRequest(fd, &buffer, &request)) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          requests_.push_back(request);
        }
        const std::string answer = respond_(request);
        if (answer.empty()) {
          char c;
          while (read(fd, &c, 1) > 0) {
          }
          break;
        }
        if (write(fd, answer.data(), answer.size()) != static_cast<ssize_t>(answer.size())) break;
      }
      connection_fd_ = -1;
      close(fd);
    }
  }

  // The next request of the connection; false at its end.
  static bool ReadRequest(int fd, std::string* buffer, SeenRequest* request) {
    size_t end;
    while ((end = buffer->find("\r\n\r\n")) == std::string::npos) {
      if (!ReadMore(fd, buffer)) return false;
    }
    request->head = buffer->substr(0, end);
    buffer->erase(0, end + 4);
    size_t length = 0;
    const size_t at = request->head.find("Content-Length: ");
    if (at != std::string::npos) {
      const size_t from = at + 16;
      absl::SimpleAtoi(request->head.substr(from, request->head.find("\r\n", from) - from),
                       &length);
    }
    while (buffer->size() < length) {
      if (!ReadMore(fd, buffer)) return false;
    }
    request->body = buffer->substr(0, length);
    buffer->erase(0, length);
    return true;
  }
  static bool ReadMore(int fd, std::string* buffer) {
    char bytes[4096];
    const ssize_t n = read(fd, bytes, sizeof(bytes));
    if (n <= 0) return false;
    buffer->append(bytes, static_cast<size_t>(n));
    return true;
  }

  const std::function<std::string(const SeenRequest&)> respond_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::atomic<int> connection_fd_{-1};  // the connection being served
  mutable std::mutex mu_;
  std::vector<SeenRequest> requests_;
  std::thread thread_;
};

std::string Answer(std::string_view status_line, std::string_view headers, std::string_view body) {
  return absl::StrCat("HTTP/1.1 ", std::string(status_line), "\r\n", std::string(headers),
                      "Content-Length: ", body.size(), "\r\n\r\n", std::string(body));
}

constexpr char kModels[] = R"({"object":"list","data":[{"id":"stories260K","object":"model"}]})";
constexpr char kStream[] =
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],"
    "\"usage\":null}\n\n"
    ": ping\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}],\"usage\":null}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" b\"}}],\"usage\":null}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],"
    "\"usage\":null}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n"
    "data: [DONE]\n\n";

// Models for GET, `stream` (as a 200 event stream) for every POST.
std::function<std::string(const SeenRequest&)> Streams(std::string stream) {
  return [stream = std::move(stream)](const SeenRequest& r) {
    if (r.head.starts_with("GET /v1/models ")) return Answer("200 OK", "", kModels);
    return Answer("200 OK", "Content-Type: text/event-stream\r\n", stream);
  };
}

v1::GenerateRequest Request() {
  v1::GenerateRequest r;
  r.set_text("Once upon a time");
  r.set_max_tokens(2);
  return r;
}

// Streams `request` to its end: the text and token count received, and the status.
struct Outcome {
  std::string text;
  int tokens = 0;
  int pieces = 0;
  int64_t completion_tokens = -1;
  absl::Status status;
  CallInfo info;
};
Outcome Stream(const HttpStreamSource& source, const v1::GenerateRequest& request) {
  Outcome o;
  std::unique_ptr<StreamCall> call = source.Start(request);
  StreamPiece piece;
  while (call->Next(&piece)) {
    ++o.pieces;
    o.text += piece.text;
    o.tokens += piece.tokens;
    if (piece.usage.has_value()) o.completion_tokens = piece.usage->completion_tokens();
  }
  o.status = call->Finish();
  o.info = call->info();
  return o;
}

absl::StatusOr<std::unique_ptr<HttpStreamSource>> Source(const ScriptedServer& server) {
  HttpStreamSource::Options o;
  o.target = server.target();
  o.bearer_token = "secret";
  o.timeout = absl::Seconds(20);
  return HttpStreamSource::Create(o);
}

TEST(HttpStreamSourceTest, StreamsPiecesAndReusesTheConnection) {
  ScriptedServer server(Streams(kStream));
  absl::StatusOr<std::unique_ptr<HttpStreamSource>> source = Source(server);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->model(), "stories260K");
  for (int i = 0; i < 2; ++i) {
    const Outcome o = Stream(**source, Request());
    EXPECT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.text, " a b");
    EXPECT_EQ(o.tokens, 2);
    EXPECT_EQ(o.pieces, 5);  // the comment is no piece
    EXPECT_EQ(o.completion_tokens, 2);
    EXPECT_EQ(o.info.replica, server.target());
  }
  // GET /v1/models on a connection of its own, then both calls on one.
  EXPECT_EQ(server.connections(), 2);
  const std::vector<SeenRequest> seen = server.requests();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_THAT(seen[1].head, HasSubstr("POST /v1/chat/completions HTTP/1.1"));
  EXPECT_THAT(seen[1].head, HasSubstr("Authorization: Bearer secret"));
  EXPECT_THAT(seen[1].head, Not(HasSubstr("Expect:")));
  EXPECT_THAT(seen[1].body, HasSubstr(R"("stream":true)"));
  EXPECT_THAT(seen[1].body, HasSubstr(R"("model":"stories260K")"));
}

TEST(HttpStreamSourceTest, ErrorAnswersCarryTheirCodeAndRetryHint) {
  ScriptedServer server([](const SeenRequest& r) {
    if (r.head.starts_with("GET")) return Answer("200 OK", "", kModels);
    return Answer("429 Too Many Requests", "Retry-After: 2\r\nContent-Type: application/json\r\n",
                  R"({"error":{"message":"engine queue full","type":"rate_limit_exceeded",)"
                  R"("param":null,"code":"rate_limit_exceeded"}})");
  });
  absl::StatusOr<std::unique_ptr<HttpStreamSource>> source = Source(server);
  ASSERT_TRUE(source.ok()) << source.status();
  const Outcome o = Stream(**source, Request());
  EXPECT_EQ(o.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(o.status.message(), "HTTP 429: engine queue full");
  EXPECT_EQ(o.info.retry_hint, absl::Seconds(2));
  EXPECT_TRUE(o.info.retry_after);
  EXPECT_EQ(o.pieces, 0);
}

TEST(HttpStreamSourceTest, ErrorEventsAndCutStreamsFail) {
  ScriptedServer error_event(Streams(
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n"
      "data: {\"error\":{\"message\":\"deadline\",\"type\":\"server_error\",\"code\":\"timeout\"}}"
      "\n\n"));
  absl::StatusOr<std::unique_ptr<HttpStreamSource>> source = Source(error_event);
  ASSERT_TRUE(source.ok()) << source.status();
  Outcome o = Stream(**source, Request());
  EXPECT_EQ(o.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(o.text, " a");

  ScriptedServer cut(
      Streams("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n"));
  source = Source(cut);
  ASSERT_TRUE(source.ok()) << source.status();
  o = Stream(**source, Request());
  EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(o.status.message(), HasSubstr("[DONE]"));
}

TEST(HttpStreamSourceTest, CancelEndsAStreamThatWaits) {
  ScriptedServer server([](const SeenRequest& r) -> std::string {
    if (r.head.starts_with("GET")) return Answer("200 OK", "", kModels);
    return "";  // headers never come: the call waits until cancelled
  });
  absl::StatusOr<std::unique_ptr<HttpStreamSource>> source = Source(server);
  ASSERT_TRUE(source.ok()) << source.status();
  std::unique_ptr<StreamCall> call = (*source)->Start(Request());
  std::thread canceller([&] {
    // Cancel once the server has the request (the call is then waiting in Next).
    while (server.requests().size() < 2) std::this_thread::yield();
    call->Cancel();
  });
  StreamPiece piece;
  EXPECT_FALSE(call->Next(&piece));
  canceller.join();
  EXPECT_EQ(call->Finish().code(), absl::StatusCode::kCancelled);
  // A call never started is cancelled by Finish.
  EXPECT_EQ((*source)->Start(Request())->Finish().code(), absl::StatusCode::kCancelled);
}

TEST(HttpStreamSourceTest, CreateFailsWithoutAServerOrAModel) {
  HttpStreamSource::Options o;
  EXPECT_EQ(HttpStreamSource::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  ScriptedServer empty([](const SeenRequest&) { return Answer("200 OK", "", R"({"data":[]})"); });
  o.target = empty.target();
  EXPECT_EQ(HttpStreamSource::Create(o).status().code(), absl::StatusCode::kFailedPrecondition);
  ScriptedServer denied([](const SeenRequest&) {
    return Answer("401 Unauthorized", "", R"({"error":{"message":"bad token"}})");
  });
  o.target = denied.target();
  EXPECT_EQ(HttpStreamSource::Create(o).status().code(), absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace kvserve::client::bench
