#include "server/tls_flags.h"

#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "server/tls_credentials.h"

ABSL_FLAG(std::string, tls_cert, "",
          "TLS: PEM certificate chain of the gRPC port (with --tls-key); empty = plaintext. "
          "Re-read every --tls-refresh-interval; new connections get a replaced one, open "
          "ones keep theirs.");
ABSL_FLAG(std::string, tls_key, "", "TLS: PEM private key of --tls-cert (unencrypted).");
ABSL_FLAG(std::string, tls_client_ca, "",
          "Mutual TLS: PEM CA file; clients (health probes too) must present a certificate "
          "it signed. Empty = no client certificate asked for.");
ABSL_FLAG(absl::Duration, tls_refresh_interval, absl::Seconds(60),
          "TLS: how often the certificate, key and CA files (kvserve: also the "
          "--session-cache-tls-* ones) are checked for changes; whole seconds >= 1s.");
ABSL_FLAG(std::string, metrics_tls_cert, "",
          "HTTPS for /metrics: PEM certificate chain (with --metrics-tls-key); read once at "
          "start (a new one needs a restart). Empty = plain HTTP.");
ABSL_FLAG(std::string, metrics_tls_key, "", "HTTPS for /metrics: PEM key of --metrics-tls-cert.");

namespace kvserve::server {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFlags() {
  return MakeServerCredentials({.cert_file = absl::GetFlag(FLAGS_tls_cert),
                                .key_file = absl::GetFlag(FLAGS_tls_key),
                                .client_ca_file = absl::GetFlag(FLAGS_tls_client_ca),
                                .refresh_interval = TlsRefreshIntervalFromFlag()});
}

absl::Duration TlsRefreshIntervalFromFlag() { return absl::GetFlag(FLAGS_tls_refresh_interval); }

namespace {

// Reads a certificate flag pair into PEM text (both left empty when both flags are).
absl::Status LoadPemFlags(const std::string& cert, const std::string& key, const char* flags,
                          std::string* cert_pem, std::string* key_pem) {
  if (cert.empty() && key.empty()) return absl::OkStatus();
  absl::StatusOr<PemKeyCertPair> pair = LoadKeyCertPair(cert, key);
  if (!pair.ok())
    return absl::InvalidArgumentError(absl::StrCat(flags, ": ", pair.status().message()));
  *cert_pem = std::move(pair->cert_pem);
  *key_pem = std::move(pair->key_pem);
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyMetricsTlsFlags(MetricsHttpOptions& metrics) {
  return LoadPemFlags(absl::GetFlag(FLAGS_metrics_tls_cert), absl::GetFlag(FLAGS_metrics_tls_key),
                      "--metrics-tls-cert/--metrics-tls-key", &metrics.tls_cert_pem,
                      &metrics.tls_key_pem);
}

absl::Status ApplyHttpTlsFlags(HttpDaemonOptions& http) {
  if (!absl::GetFlag(FLAGS_tls_client_ca).empty() && !absl::GetFlag(FLAGS_tls_cert).empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca: mutual TLS is available on the gRPC port only; turn the HTTP API "
        "off (--http-listen=) or drop --tls-client-ca");
  }
  return LoadPemFlags(absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                      "--tls-cert/--tls-key", &http.tls_cert_pem, &http.tls_key_pem);
}

}  // namespace kvserve::server
