// The TLS flags kvserve and kvserve-cache share, defined once (tls_flags.cc), and how they
// become options:
//   --tls-cert, --tls-key, --tls-client-ca, --tls-refresh-interval   the gRPC port's TLS
//   --metrics-tls-cert, --metrics-tls-key                            HTTPS for /metrics
// (kvserve's HTTP API port serves --tls-cert/--tls-key too: ApplyHttpTlsFlags).
// A binary that links kvserve_tls_flags takes these flags; mains call the functions below
// after absl::ParseCommandLine.
#ifndef KVSERVE_SERVER_TLS_FLAGS_H_
#define KVSERVE_SERVER_TLS_FLAGS_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "server/http_daemon.h"
#include "server/metrics_http_server.h"

namespace kvserve::server {

// The gRPC port's credentials from --tls-cert, --tls-key, --tls-client-ca and
// --tls-refresh-interval (MakeServerCredentials: insecure when --tls-cert is empty).
// INVALID_ARGUMENT as MakeServerCredentials says.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFlags();

// --tls-refresh-interval (also how often a binary's other certificate files are re-read).
absl::Duration TlsRefreshIntervalFromFlag();

// --metrics-tls-cert and --metrics-tls-key read into metrics.tls_cert_pem / tls_key_pem
// (left empty when both flags are). INVALID_ARGUMENT naming the flags when a file does
// not load or only one of the two is set.
absl::Status ApplyMetricsTlsFlags(MetricsHttpOptions& metrics);

// --tls-cert and --tls-key (the gRPC port's) read into the HTTP API port's PEM text, so
// both ports of kvserve serve the same certificate (read once: a new certificate needs
// a restart for HTTP). INVALID_ARGUMENT with --tls-client-ca (mutual TLS is the gRPC
// port's only), and as ApplyMetricsTlsFlags.
absl::Status ApplyHttpTlsFlags(HttpDaemonOptions& http);

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_TLS_FLAGS_H_
