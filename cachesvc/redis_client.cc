#include "cachesvc/redis_client.h"

#include <sys/time.h>

#include <charconv>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve::cachesvc {
namespace {

absl::Status ContextError(std::string_view what, const redisContext* c) {
  if (c == nullptr)
    return absl::UnavailableError(absl::StrCat("redis ", std::string(what), ": out of memory"));
  return absl::UnavailableError(absl::StrCat("redis ", std::string(what), ": ", c->errstr));
}

}  // namespace

absl::Status ParseRedisAddress(std::string_view address, RedisOptions* options) {
  std::string_view host;
  std::string_view port;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("redis address '", std::string(address), "': want [V6]:PORT"));
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("redis address '", std::string(address), "': want HOST:PORT"));
    }
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  int value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (host.empty() || ec != std::errc() || end != port.data() + port.size() || value < 1 ||
      value > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("redis address '", std::string(address),
                                                   "': want HOST:PORT with PORT in 1..65535"));
  }
  options->host = std::string(host);
  options->port = value;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RedisClient>> RedisClient::Create(const RedisOptions& options) {
  if (options.host.empty() || options.port < 1 || options.port > 65535) {
    return absl::InvalidArgumentError("redis: host must be set and port in 1..65535");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("redis: timeout must be positive");
  }
  if (options.max_idle_connections < 0) {
    return absl::InvalidArgumentError("redis: max_idle_connections must be >= 0");
  }
  return std::unique_ptr<RedisClient>(new RedisClient(options));
}

RedisClient::~RedisClient() = default;

absl::StatusOr<RedisClient::Context> RedisClient::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      Context c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  const timeval tv = absl::ToTimeval(options_.timeout);
  Context c(redisConnectWithTimeout(options_.host.c_str(), options_.port, tv));
  if (c == nullptr || c->err != 0) return ContextError("connect", c.get());
  if (redisSetTimeout(c.get(), tv) != REDIS_OK) return ContextError("set timeout", c.get());
  return c;
}

void RedisClient::Release(Context context) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(idle_.size()) < options_.max_idle_connections) {
    idle_.push_back(std::move(context));
  }
}

absl::StatusOr<std::vector<RedisReply>> RedisClient::Pipeline(
    std::span<const RedisCommand> commands) {
  std::vector<RedisReply> replies;
  if (commands.empty()) return replies;
  absl::StatusOr<Context> context = Acquire();
  if (!context.ok()) return context.status();
  redisContext* c = context->get();
  std::vector<const char*> argv;
  std::vector<size_t> argv_len;
  for (const RedisCommand& command : commands) {
    argv.clear();
    argv_len.clear();
    for (std::string_view arg : command) {
      argv.push_back(arg.data());
      argv_len.push_back(arg.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), argv_len.data()) !=
        REDIS_OK) {
      return ContextError("append", c);  // drops the connection
    }
  }
  replies.reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    void* reply = nullptr;
    if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr) {
      return ContextError("reply", c);  // drops the connection
    }
    replies.emplace_back(static_cast<redisReply*>(reply));
  }
  Release(*std::move(context));
  return replies;
}

absl::StatusOr<RedisReply> RedisClient::Run(const RedisCommand& command) {
  absl::StatusOr<std::vector<RedisReply>> replies = Pipeline(std::span(&command, 1));
  if (!replies.ok()) return replies.status();
  return std::move(replies->front());
}

absl::Status RedisErrorStatus(std::string_view what, const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ERROR || reply.str == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("redis ", std::string(what), ": unexpected reply type ", reply.type));
  }
  return absl::UnavailableError(
      absl::StrCat("redis ", std::string(what), ": ", std::string(reply.str, reply.len)));
}

bool IsRedisError(const redisReply& reply, std::string_view prefix) {
  return reply.type == REDIS_REPLY_ERROR && reply.str != nullptr &&
         std::string_view(reply.str, reply.len).substr(0, prefix.size()) == prefix;
}

}  // namespace kvserve::cachesvc
