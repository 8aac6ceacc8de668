#include "cachesvc/testing/redis_server.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvserve::cachesvc::testing {
namespace {

// A port the kernel considers free now (bind to port 0, read it back, close).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool Pings(int port) {
  const timeval tv{0, 200'000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  bool ok = false;
  if (c != nullptr && c->err == 0) {
    redisSetTimeout(c, tv);
    auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
    ok = reply != nullptr && reply->type == REDIS_REPLY_STATUS;
    if (reply != nullptr) freeReplyObject(reply);
  }
  if (c != nullptr) redisFree(c);
  return ok;
}

}  // namespace

RedisServer::RedisServer() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvserve_redis_XXXXXX").string();
  if (mkdtemp(tmpl.data()) != nullptr) dir_ = tmpl;
}

RedisServer::~RedisServer() {
  Stop();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

bool RedisServer::BinaryExists() { return access(kRedisServerBinary, X_OK) == 0; }

absl::Status RedisServer::Start() {
  if (pid_ > 0) return absl::FailedPreconditionError("redis-server already running");
  if (dir_.empty()) return absl::InternalError("no temporary directory");
  if (port_ == 0) port_ = FreePort();
  if (port_ == 0) return absl::InternalError("no free port");
  const std::string port = absl::StrCat(port_);
  const std::string dir = dir_.string();
  const std::string log = (dir_ / "redis.log").string();
  std::vector<const char*> argv = {
      kRedisServerBinary, "--port", port.c_str(), "--bind",    "127.0.0.1", "--save",    "",
      "--appendonly",     "no",     "--dir",      dir.c_str(), "--logfile", log.c_str(), nullptr};
  pid_ = fork();
  if (pid_ < 0) return absl::InternalError("fork failed");
  if (pid_ == 0) {
    execv(kRedisServerBinary, const_cast<char* const*>(argv.data()));
    _exit(127);
  }
  for (int i = 0; i < 500; ++i) {
    if (Pings(port_)) return absl::OkStatus();
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat("redis-server exited; see ", log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Stop();
  return absl::DeadlineExceededError("redis-server did not answer PING within 10 s");
}

void RedisServer::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  kill(pid_, SIGCONT);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void RedisServer::Pause() {
  if (pid_ > 0) kill(pid_, SIGSTOP);
}

void RedisServer::Resume() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

}  // namespace kvserve::cachesvc::testing
