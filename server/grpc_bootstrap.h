// The gRPC server bootstrap kvserve and kvserve-cache share: the listening port and its
// credentials, message limits, the resource quota, channel arguments, standard health
// checking (liveness "" and one readiness service name) and server reflection; and the
// /metrics endpoint beside the gRPC port. Knows neither the engine nor the cache: the
// caller registers its own services and keeps readiness up to date.
#ifndef KVSERVE_SERVER_GRPC_BOOTSTRAP_H_
#define KVSERVE_SERVER_GRPC_BOOTSTRAP_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/metrics_http_server.h"

namespace kvserve::server {

struct GrpcServerOptions {
  // "HOST:PORT"; port 0 picks a free port (GrpcServer::port).
  std::string listen_address;
  // Transport security (server/tls_credentials.h); null = plaintext.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Largest message received; larger ones fail with RESOURCE_EXHAUSTED before reaching
  // a service.
  int32_t max_receive_message_bytes = 4 << 20;
  // Largest message sent; negative = gRPC's default (no limit).
  int32_t max_send_message_bytes = -1;
  // The grpc::ResourceQuota: its name, the memory gRPC may use for its connections and
  // calls (under pressure it stops reading and refuses new streams rather than growing),
  // and the threads of the synchronous server's pool (0 = gRPC's default).
  std::string quota_name = "kvserve";
  int64_t memory_quota_bytes = int64_t{256} << 20;
  int32_t max_threads = 0;
  // Further integer channel arguments (GRPC_ARG_...), applied in order.
  std::vector<std::pair<std::string, int>> channel_args;
  // The health service name that answers readiness, and its status once started
  // (liveness "" is always SERVING).
  std::string readiness_service;
  bool ready_at_start = false;
};

struct GrpcServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the bound port
};

// Builds and starts a gRPC server serving `services` (not owned; they must outlive it)
// plus grpc.health.v1.Health and server reflection. UNAVAILABLE when the address cannot
// be bound. Options are not validated here (each server checks its own, naming its flags).
absl::StatusOr<GrpcServer> StartGrpcServer(const GrpcServerOptions& options,
                                           const std::vector<grpc::Service*>& services);

// The /metrics endpoint serving `source` (which must outlive it), or null when
// options.address is empty (no endpoint). MetricsHttpServer::Start's errors.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetricsEndpoint(
    const MetricsHttpOptions& options, const MetricsSource& source);

// One process's serving ports: the gRPC server (StartGrpcServer) and the /metrics
// endpoint beside it (StartMetricsEndpoint), started together and stopped in order. What
// kvserve's Server and kvserve-cache's CacheServer share.
// Threading: all methods are thread-safe; Stop and the destructor must not race.
class ServingEndpoints {
 public:
  // Starts the gRPC server over `services` and, unless metrics.address is empty, the
  // /metrics endpoint serving `source` (both must outlive the endpoints). Errors of
  // StartGrpcServer and MetricsHttpServer::Start (then nothing is left running).
  static absl::StatusOr<std::unique_ptr<ServingEndpoints>> Start(
      const GrpcServerOptions& grpc_options, const std::vector<grpc::Service*>& services,
      const MetricsHttpOptions& metrics, const MetricsSource& source);
  // Stops /metrics first (no scrape may read what the owner destroys next), then the
  // gRPC server with no grace if Stop() was not called.
  ~ServingEndpoints();

  // The readiness service's status (liveness "" stays SERVING until Stop).
  void SetReady(bool ready);
  // Readiness NOT_SERVING, health shut down, then the gRPC server stops: calls still
  // running at `deadline` are cancelled; returns once every call has finished.
  // Idempotent.
  void Stop(absl::Time deadline);

  int port() const { return grpc_.port; }
  // 0 when there is no metrics endpoint.
  int metrics_port() const { return metrics_ != nullptr ? metrics_->port() : 0; }

 private:
  ServingEndpoints() = default;

  GrpcServer grpc_;
  std::string readiness_service_;
  std::unique_ptr<MetricsHttpServer> metrics_;
  std::mutex stop_mu_;
  bool stopped_ = false;  // guarded by stop_mu_
};

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_GRPC_BOOTSTRAP_H_
