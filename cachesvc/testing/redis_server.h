// A real redis-server (/usr/bin/redis-server) for tests: started on a free local port in
// a temporary directory with persistence off, killed by Stop() or the destructor. Test-only.
#ifndef KVSERVE_CACHESVC_TESTING_REDIS_SERVER_H_
#define KVSERVE_CACHESVC_TESTING_REDIS_SERVER_H_

#include <sys/types.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"

namespace kvserve::cachesvc::testing {

inline constexpr char kRedisServerBinary[] = "/usr/bin/redis-server";

// Threading: one thread.
class RedisServer {
 public:
  RedisServer();
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  static bool BinaryExists();
  // Starts the server (on the port chosen the first time; again on the same port after
  // Stop) and waits until it answers PING (at most 10 s).
  absl::Status Start();
  // SIGKILL and wait: the server vanishes as in a crash.
  void Stop();
  // SIGSTOP / SIGCONT: the server keeps its connections but stops answering (a hung host).
  void Pause();
  void Resume();
  int port() const { return port_; }

 private:
  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvserve::cachesvc::testing

#endif  // KVSERVE_CACHESVC_TESTING_REDIS_SERVER_H_
