// The /metrics endpoint answers every request with an HTTP status and keeps serving
// scrapes while other clients misbehave. (tests/metrics_port_test.py repeats the hostile
// requests against the real kvserve binary, with OpenBLAS loaded.)
#include "server/metrics_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// A fixed exposition: the endpoint, not what it serves, is under test.
class FixedSource : public MetricsSource {
 public:
  std::string SerializeText() const override {
    return "# TYPE kvserve_request_finished_total counter\nkvserve_request_finished_total 0\n";
  }
};

// A connected TCP socket to 127.0.0.1:port with 5 s send/receive timeouts (so a hung
// server fails the test instead of hanging it); -1 on failure.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval timeout = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` on a new connection and returns everything the server sends until
// it closes the connection (or 5 s pass).
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return "connect failed";
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer and close before reading everything
    sent += static_cast<size_t>(n);
  }
  std::string reply;
  char buffer[4096];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    reply.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return reply;
}

std::string Request(const std::string& method, const std::string& path,
                    const std::string& body = "") {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  if (!body.empty()) r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MetricsHttpOptions options;
    options.address = "127.0.0.1:0";
    options.idle_timeout = absl::Seconds(2);
    auto server = MetricsHttpServer::Start(options, metrics_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  int port() const { return server_->port(); }

  FixedSource metrics_;
  std::unique_ptr<MetricsHttpServer> server_;
};

TEST_F(MetricsHttpServerTest, GetMetricsServesTheTextFormat) {
  const std::string reply = Exchange(port(), Request("GET", "/metrics"));
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(reply, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(reply, HasSubstr("# TYPE kvserve_request_finished_total counter"));
}

TEST_F(MetricsHttpServerTest, HeadHasHeadersAndNoBody) {
  const std::string reply = Exchange(port(), Request("HEAD", "/metrics"));
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(reply, Not(HasSubstr("# TYPE")));
}

TEST_F(MetricsHttpServerTest, EveryOtherRequestGetsAStatus) {
  EXPECT_THAT(Exchange(port(), Request("GET", "/")), StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(Exchange(port(), Request("GET", "/metrics/x")), StartsWith("HTTP/1.1 404"));
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
    const std::string reply = Exchange(port(), Request(method, "/metrics", "a=1&b=2"));
    EXPECT_THAT(reply, StartsWith("HTTP/1.1 405")) << method;
    EXPECT_THAT(reply, HasSubstr("Allow: GET, HEAD")) << method;
  }
  // A 64 KiB URL: refused with a 4xx status by libmicrohttpd.
  EXPECT_THAT(Exchange(port(), Request("GET", "/" + std::string(64 << 10, 'a'))),
              StartsWith("HTTP/1.1 4"));
  EXPECT_THAT(Exchange(port(), "\x16\x03\x01 not http at all\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  // Still serving.
  EXPECT_THAT(Exchange(port(), Request("GET", "/metrics")), StartsWith("HTTP/1.1 200"));
}

TEST_F(MetricsHttpServerTest, StalledConnectionsDoNotBlockScrapes) {
  std::vector<int> stalled;
  for (int i = 0; i < 40; ++i) {
    const int fd = Connect(port());
    ASSERT_GE(fd, 0);
    const std::string partial = "GET /metrics HTTP/1.1\r\n";
    ASSERT_EQ(send(fd, partial.data(), partial.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(partial.size()));
    stalled.push_back(fd);
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(Exchange(port(), Request("GET", "/metrics")), StartsWith("HTTP/1.1 200"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  // The idle timeout (2 s here) closes a stalled connection: recv sees EOF (0), not the
  // 5 s receive timeout (-1).
  char byte;
  EXPECT_EQ(recv(stalled.front(), &byte, 1, 0), 0);
  for (int fd : stalled) close(fd);
}

TEST(MetricsHttpServerStartTest, BadOptionsAndBusyPorts) {
  FixedSource metrics;
  MetricsHttpOptions options;
  options.address = "127.0.0.1:0";
  auto first = MetricsHttpServer::Start(options, metrics);
  ASSERT_TRUE(first.ok()) << first.status();
  // The same port cannot be bound twice: a clear UNAVAILABLE.
  options.address = "127.0.0.1:" + std::to_string((*first)->port());
  EXPECT_EQ(MetricsHttpServer::Start(options, metrics).status().code(),
            absl::StatusCode::kUnavailable);

  MetricsHttpOptions bad;
  bad.address = "127.0.0.1:0";
  bad.worker_threads = 0;
  EXPECT_THAT(ValidateMetricsHttpOptions(bad).message(), HasSubstr("metrics-threads"));
  bad = MetricsHttpOptions();
  bad.idle_timeout = absl::Milliseconds(10);
  EXPECT_THAT(ValidateMetricsHttpOptions(bad).message(), HasSubstr("metrics-timeout"));
  bad = MetricsHttpOptions();
  bad.max_connections = 1;
  EXPECT_THAT(ValidateMetricsHttpOptions(bad).message(), HasSubstr("metrics-max-connections"));
  bad = MetricsHttpOptions();
  bad.address = "nohost";
  EXPECT_EQ(ValidateMetricsHttpOptions(bad).code(), absl::StatusCode::kInvalidArgument);

  MetricsHttpOptions v6;
  v6.address = "[::1]:0";
  auto ipv6 = MetricsHttpServer::Start(v6, metrics);
  if (ipv6.ok()) {
    EXPECT_GT((*ipv6)->port(), 0);
  } else {
    // Hosts without IPv6 loopback: a clean error, never a crash.
    EXPECT_EQ(ipv6.status().code(), absl::StatusCode::kUnavailable) << ipv6.status();
  }
}

}  // namespace
}  // namespace kvserve::server
