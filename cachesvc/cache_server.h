// The kvserve-cache server: the SessionCache service, standard health checking
// (liveness "" and readiness "kvserve.v1.SessionCache", both SERVING once started),
// server reflection and the /metrics endpoint, over the stores it is given.
//
// Threading: all methods are thread-safe. Destruction shuts down with no grace if
// Shutdown() was not called.
#ifndef KVSERVE_CACHESVC_CACHE_SERVER_H_
#define KVSERVE_CACHESVC_CACHE_SERVER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cachesvc/block_store.h"
#include "cachesvc/cache_metrics.h"
#include "cachesvc/session_cache_service.h"
#include "common/clock.h"
#include "grpcpp/grpcpp.h"
#include "server/bearer_auth.h"
#include "server/grpc_bootstrap.h"
#include "server/metrics_http_server.h"
#include "server/shutdown_signals.h"

namespace kvserve::cachesvc {

// The health service name that answers readiness.
inline constexpr char kCacheReadinessService[] = "kvserve.v1.SessionCache";

struct CacheServerOptions {
  // gRPC listen address "HOST:PORT"; port 0 picks a free port (see port()). Default
  // 127.0.0.1:50061.
  std::string listen_address = "127.0.0.1:50061";
  // The /metrics endpoint; an empty address (the default) = none.
  server::MetricsHttpOptions metrics{""};
  // Largest message received or sent; larger ones fail with RESOURCE_EXHAUSTED. Must
  // exceed the largest chunk (4 MiB) plus framing. Default 8 MiB.
  int32_t max_message_bytes = 8 << 20;
  // Threads handling calls at most (the synchronous server's pool; calls beyond wait).
  // Default 64.
  int32_t max_threads = 64;
  // Memory gRPC may use for connections and calls. Default 512 MiB.
  int64_t grpc_memory_quota_bytes = int64_t{512} << 20;
  // Transport security of the gRPC port (see server/tls_credentials.h); null (the
  // default) = plaintext.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  SessionCacheService::Options service;
  // Bearer tokens every call but health must carry; nullopt = no authentication.
  std::optional<server::BearerAuth> auth;
  // RunUntilSignalled: how long calls in flight may run after SIGTERM before they are
  // cancelled. Default 10 s.
  absl::Duration drain_grace = absl::Seconds(10);
};

// Checks the options. INVALID_ARGUMENT naming the option by its flag's name
// ("max-threads must be >= 2").
absl::Status ValidateCacheServerOptions(const CacheServerOptions& options);

class CacheServer {
 public:
  // Builds and starts the server over `blocks` and `sessions` (owned), restoring the
  // eviction hints of the session records found (SessionIndex::Create); `clock` must
  // outlive the server. UNAVAILABLE when an address cannot be bound or the session
  // records cannot be read, INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<CacheServer>> Start(
      CacheServerOptions options, std::unique_ptr<BlockStore> blocks,
      std::unique_ptr<SessionRecordStore> sessions, const common::Clock* clock);
  ~CacheServer();

  // Readiness NOT_SERVING, then stops the gRPC server: calls in flight get up to `grace`
  // to finish, then are cancelled. Idempotent.
  void Shutdown(absl::Duration grace);
  // Blocks until SIGTERM or SIGINT arrives through `signals`, then Shutdown with
  // options.drain_grace. Progress lines on stdout (server::DrainOnSignal). Call from one
  // thread.
  void RunUntilSignalled(const server::ShutdownSignals& signals);

  int port() const { return endpoints_->port(); }
  // 0 when there is no metrics endpoint.
  int metrics_port() const { return endpoints_->metrics_port(); }
  CacheMetrics& metrics() { return *metrics_; }
  BlockStore& blocks() { return *blocks_; }
  SessionIndex& sessions() { return *index_; }

 private:
  CacheServer() = default;

  CacheServerOptions options_;
  std::unique_ptr<BlockStore> blocks_;
  std::unique_ptr<SessionRecordStore> sessions_;
  std::unique_ptr<SessionIndex> index_;
  std::unique_ptr<CacheMetrics> metrics_;
  std::unique_ptr<SessionCacheService> service_;
  std::unique_ptr<server::ServingEndpoints> endpoints_;
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_CACHE_SERVER_H_
