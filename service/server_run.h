// kvserve's process once its flags are mapped (service/server_main.cc calls it): the
// session cache client, the server (liveness at once, readiness once the model is
// loaded), the model and engine, and the drain on SIGTERM or SIGINT: new work gets
// UNAVAILABLE, in-flight requests get ServerOptions::drain_grace, then Run returns. A
// second signal during the drain ends the grace period at once.
#ifndef KVSERVE_SERVICE_SERVER_RUN_H_
#define KVSERVE_SERVICE_SERVER_RUN_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "backends/runtime_info.h"
#include "engine/model_loading.h"
#include "service/server.h"

namespace kvserve::service {

// The session cache service (kvserve-cache) the engine fetches KV and session records
// from and writes them to. Timeouts and queue limits are Engine::Options::remote.
struct SessionCacheOptions {
  // gRPC target HOST:PORT; empty (the default) = no session cache.
  std::string target;
  // File whose first line is the bearer token to send; empty (the default) = none.
  std::string token_file;
  // TLS: PEM CA file the service's certificate must chain to (empty = plaintext), and
  // a client certificate and key for mutual TLS. Re-read every tls_refresh_interval.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  absl::Duration tls_refresh_interval = absl::Seconds(60);
};

struct ProcessOptions {
  ServerOptions server;
  engine::ModelOptions model;
  SessionCacheOptions session_cache;
};

// Checks every option before anything starts: ValidateServerOptions,
// engine::ValidateModelOptions, and the session cache's TLS files need a target.
// INVALID_ARGUMENT naming the option (the server's by its flag's name, the model's and
// engine's by their field names, "session-cache-tls-*" for the TLS files).
absl::Status ValidateProcessOptions(const ProcessOptions& options);

// Runs kvserve until SIGTERM/SIGINT, printing its progress on stdout ("listening on ...",
// the KV pool and resident memory, "ready ...", the drain); returns OK after the drain.
// `runtime` describes the backend for the logs and metrics. Errors: ValidateProcessOptions'
// (call it first, to name flags), INVALID_ARGUMENT "session_cache_token_file: ..." or
// "--session-cache-tls-*: ..." for an unreadable file, Server::Start's, LoadModel's and
// Server::Attach's.
absl::Status RunProcess(ProcessOptions options, const backends::RuntimeInfo& runtime);

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_SERVER_RUN_H_
