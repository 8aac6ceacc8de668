// A small pool of blocking hiredis connections to one Redis server, shared by the Redis
// block store and the Redis session store.
//
// Every call either completes or fails within bounded time: connecting waits at most
// Options::timeout, and so does every socket read or write of a command (hiredis'
// SO_RCVTIMEO/SO_SNDTIMEO), so a pipeline moving large values may take longer in total
// but never blocks forever. Any failure (refused, timed out, reset, protocol error) drops
// that connection and returns UNAVAILABLE; the next call connects afresh, so the pool
// recovers by itself when Redis comes back. Redis error replies ("-ERR ...") are not
// failures of the connection: they come back as replies for the caller to judge.
#ifndef KVSERVE_CACHESVC_REDIS_CLIENT_H_
#define KVSERVE_CACHESVC_REDIS_CLIENT_H_

#include <hiredis/hiredis.h>

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvserve::cachesvc {

struct RedisOptions {
  // Server address (--redis HOST:PORT; see ParseRedisAddress).
  std::string host = "127.0.0.1";
  int port = 6379;
  // Bound on connecting and on each socket read or write of a command
  // (--redis-timeout, default 200 ms).
  absl::Duration timeout = absl::Milliseconds(200);
  // Idle connections kept for reuse (default 8). Calls beyond that many in parallel open
  // extra connections, closed when returned.
  int max_idle_connections = 8;
};

// "HOST:PORT" (IPv4 or a name; "[v6]:PORT" for IPv6) into options.host and .port.
// INVALID_ARGUMENT when malformed or the port is outside 1..65535.
absl::Status ParseRedisAddress(std::string_view address, RedisOptions* options);

struct RedisReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using RedisReply = std::unique_ptr<redisReply, RedisReplyDeleter>;

// One command's arguments (binary-safe; views must outlive the call).
using RedisCommand = std::vector<std::string_view>;

// Threading: every method is thread-safe; each call uses its own connection.
class RedisClient {
 public:
  // Does not connect: the first command does (so a service can start while Redis is down
  // and answer UNAVAILABLE until it is up). INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<RedisClient>> Create(const RedisOptions& options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Sends every command, then reads every reply (one round trip). The replies are in
  // command order; error replies are included as REDIS_REPLY_ERROR. UNAVAILABLE when the
  // connection fails at any point (the results of commands already sent are unknown).
  absl::StatusOr<std::vector<RedisReply>> Pipeline(std::span<const RedisCommand> commands);
  // One command.
  absl::StatusOr<RedisReply> Run(const RedisCommand& command);

  const RedisOptions& options() const { return options_; }

 private:
  struct ContextDeleter {
    void operator()(redisContext* c) const { redisFree(c); }
  };
  using Context = std::unique_ptr<redisContext, ContextDeleter>;

  explicit RedisClient(const RedisOptions& options) : options_(options) {}
  absl::StatusOr<Context> Acquire();
  void Release(Context context);

  const RedisOptions options_;
  std::mutex mu_;
  std::vector<Context> idle_ ABSL_GUARDED_BY(mu_);
};

// UNAVAILABLE naming `what` and the error text of a REDIS_REPLY_ERROR reply.
absl::Status RedisErrorStatus(std::string_view what, const redisReply& reply);
// True when `reply` is an error reply starting with `prefix` (e.g. "OOM").
bool IsRedisError(const redisReply& reply, std::string_view prefix);

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_REDIS_CLIENT_H_
