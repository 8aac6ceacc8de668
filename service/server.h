// The kvserve gRPC server: the Inference service, standard health checking, server
// reflection (grpc.reflection.v1alpha, always on) and the /metrics endpoint, with a
// graceful drain.
//
// Lifecycle: Start() listens at once (liveness SERVING, readiness NOT_SERVING) so that
// probes can see a loading replica; Attach() hands over the loaded model and engine
// (readiness SERVING); Drain() refuses new work, lets in-flight generations finish up to
// a grace period, shuts the engine down and stops the server; RunUntilSignalled() drains
// on SIGTERM/SIGINT (server/drain_on_signal.h).
#ifndef KVSERVE_SERVICE_SERVER_H_
#define KVSERVE_SERVICE_SERVER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "model/chat_prompter.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "server/grpc_bootstrap.h"
#include "server/memory_trimmer.h"
#include "server/metrics_http_server.h"
#include "server/shutdown_signals.h"
#include "service/http_api.h"
#include "service/inference_service.h"
#include "service/metrics.h"

namespace kvserve::service {

// The health service name that answers readiness.
inline constexpr char kReadinessService[] = "kvserve.v1.Inference";

struct ServerOptions {
  // gRPC listen address "HOST:PORT"; port 0 picks a free port (see Server::port()).
  // Default 127.0.0.1:50051.
  std::string listen_address = "127.0.0.1:50051";
  // The /metrics endpoint (listen address 127.0.0.1:9464 by default, port 0 = any free
  // port); an empty metrics.address = no metrics endpoint.
  server::MetricsHttpOptions metrics;
  // Largest request message accepted; larger ones fail with RESOURCE_EXHAUSTED before
  // reaching the service. Default 4 MiB.
  int32_t max_receive_message_bytes = 4 << 20;
  // Memory gRPC may use for its connections and calls (a grpc::ResourceQuota): under
  // pressure it stops reading and refuses new streams rather than growing. Default
  // 256 MiB.
  int64_t grpc_memory_quota_bytes = int64_t{256} << 20;
  // Streams (calls) open at once on one HTTP/2 connection; a client asking for more
  // waits (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). Default 256.
  int32_t max_concurrent_streams = 256;
  // How often freed heap memory is returned to the OS (see MemoryTrimmer); zero = never.
  // Default 2 s.
  absl::Duration malloc_trim_interval = absl::Seconds(2);
  // RunUntilSignalled: how long in-flight requests may run after SIGTERM before they are
  // cancelled. Default 30 s.
  absl::Duration drain_grace = absl::Seconds(30);
  // Transport security of the gRPC port (see server/tls_credentials.h: TLS, mutual TLS,
  // certificates reloaded); null (the default) = plaintext.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Limits and hints of the Inference service.
  InferenceService::Options service;
  // The OpenAI-compatible HTTP API (service/http_api.h) beside gRPC, over the same
  // service; nullopt (the default here) = none. kvserve's --http-listen turns it on at
  // 127.0.0.1:8080 by default.
  std::optional<HttpApiOptions> http;
  // The chat template family that renders messages (model/chat_template.h names:
  // "chatml", "llama3", ...), for models whose file has none or a wrong one; empty (the
  // default) = the model's own template.
  std::string chat_template;
};

// Checks the options (addresses are HOST:PORT, limits positive and consistent).
// INVALID_ARGUMENT naming the option by its flag's name ("listen must be HOST:PORT ...",
// "max-message-bytes must be >= 1024, got 10").
absl::Status ValidateServerOptions(const ServerOptions& options);

// Splits "HOST:PORT" ("[::1]:50051" for IPv6); INVALID_ARGUMENT when malformed or the
// port is outside [0, 65535].
absl::Status ValidateHostPort(const std::string& address, const std::string& option_name);

// Threading: all methods are thread-safe. Destruction drains with no grace if Drain()
// was not called.
class Server {
 public:
  // Builds and starts the server. UNAVAILABLE when an address cannot be bound,
  // INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions options);
  ~Server();

  // Serves `engine` for `model` from now on (readiness becomes SERVING). The engine must
  // have been created for `model`. FAILED_PRECONDITION when already attached or draining;
  // INVALID_ARGUMENT for a null model or engine, or a default max_tokens above the
  // engine's limit; the tokenizer's error when the vocabulary cannot build one.
  absl::Status Attach(std::unique_ptr<model::Model> model, std::unique_ptr<engine::Engine> engine,
                      std::string backend_name);

  // Readiness NOT_SERVING, new calls UNAVAILABLE, waits up to `grace` for in-flight
  // generations, then shuts the engine down (cancelling what is left) and stops the
  // gRPC server. Returns true when every in-flight generation finished within the grace
  // period. Idempotent (later calls return at once with the first result).
  bool Drain(absl::Duration grace);
  // Ends a running (or the next) Drain's grace period now: what is still in flight is
  // cancelled at once. Thread-safe; for a second SIGTERM.
  void EndGrace() { service_->EndWaitIdle(); }
  // Blocks until SIGTERM or SIGINT arrives through `signals`, then drains with
  // options.drain_grace; a second signal ends the grace period (EndGrace). Progress lines
  // on stdout (server::DrainOnSignal). Returns Drain's result. Call from one thread.
  bool RunUntilSignalled(const server::ShutdownSignals& signals);

  int port() const { return endpoints_->port(); }
  // The HTTP API's port; 0 when it is off.
  int http_port() const { return http_ != nullptr ? http_->port() : 0; }
  // 0 when there is no metrics endpoint.
  int metrics_port() const { return endpoints_->metrics_port(); }
  Metrics& metrics() { return *metrics_; }
  // The attached engine, or null (tests read its stats).
  engine::Engine* engine();
  const InferenceService& service() const { return *service_; }

 private:
  Server() = default;

  ServerOptions options_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<server::ServingEndpoints> endpoints_;
  std::unique_ptr<server::MemoryTrimmer> memory_trimmer_;
  // Stopped first, by ~Server (its workers read model_, tokenizer_ and engine_).
  std::unique_ptr<HttpApi> http_;

  std::mutex mu_;
  std::unique_ptr<model::Model> model_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<model::Tokenizer> tokenizer_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<model::ChatPrompter> chat_ ABSL_GUARDED_BY(mu_);  // over tokenizer_
  std::unique_ptr<engine::Engine> engine_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ServingCore> core_ ABSL_GUARDED_BY(mu_);

  std::mutex drain_mu_;  // serializes Drain(); taken before mu_
  bool drain_started_ ABSL_GUARDED_BY(drain_mu_) = false;
  bool drain_result_ ABSL_GUARDED_BY(drain_mu_) = false;
};

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_SERVER_H_
