// TLS and mutual TLS for kvserve's gRPC servers and clients: the one place that turns
// certificate files into grpc credentials (kvserve, kvserve-cache, the session cache
// client and kvserve-cli all call it).
//
// Every file is untrusted input: it is read and parsed here first (PEM, key matching
// the certificate) so that a bad file is an INVALID_ARGUMENT naming it at start-up, not
// a handshake failure later. After start-up gRPC's FileWatcherCertificateProvider
// re-reads the files every `refresh_interval`; a changed certificate and key are served
// to new connections from then on, existing connections keep theirs. While the files are
// unreadable or the key does not match the certificate, gRPC 1.51 logs an error and new
// handshakes fail until the files are good again (open connections are unaffected), so
// write replacements atomically (rename, or a swapped symlink). Only start-up checks them.
//
// Threading: the functions are thread-safe; the returned credentials are shared and
// immutable (the reloading happens on gRPC's own thread).
#ifndef KVSERVE_SERVER_TLS_CREDENTIALS_H_
#define KVSERVE_SERVER_TLS_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace kvserve::server {

// Default of every refresh_interval below (and of the --tls-refresh-interval flags).
inline constexpr absl::Duration kDefaultTlsRefreshInterval = absl::Seconds(60);

struct ServerTlsOptions {
  // PEM certificate chain the server presents (leaf first); empty = plaintext (then the
  // other fields must be empty too).
  std::string cert_file;
  // PEM private key of that certificate (unencrypted). Required with cert_file.
  std::string key_file;
  // PEM CA certificates client certificates must chain to; non-empty = mutual TLS:
  // a client without such a certificate fails the handshake. Empty = no client
  // certificate is asked for.
  std::string client_ca_file;
  // How often the three files are checked for changes. Whole seconds, >= 1 s.
  // Default kDefaultTlsRefreshInterval (60 s).
  absl::Duration refresh_interval = kDefaultTlsRefreshInterval;
};

struct ClientTlsOptions {
  // PEM CA certificates the server's certificate must chain to (its name or IP must be
  // in the certificate's SAN); empty = plaintext (then cert_file and key_file must be
  // empty too).
  std::string ca_file;
  // PEM certificate chain and unencrypted key presented to a mutual-TLS server; both or
  // neither.
  std::string cert_file;
  std::string key_file;
  // How often the files are checked for changes. Whole seconds, >= 1 s. Default 60 s.
  absl::Duration refresh_interval = kDefaultTlsRefreshInterval;
};

// A certificate chain and its key, read and checked (PEM text as in the files).
struct PemKeyCertPair {
  std::string cert_pem;
  std::string key_pem;
};

// Reads `cert_file` (at least one PEM certificate) and `key_file` (an unencrypted PEM
// private key matching the first certificate). INVALID_ARGUMENT naming the file when a
// file cannot be read, is larger than 1 MiB, holds no such PEM block, or the key does not
// match.
absl::StatusOr<PemKeyCertPair> LoadKeyCertPair(const std::string& cert_file,
                                               const std::string& key_file);

// Credentials for grpc::ServerBuilder::AddListeningPort (ServerOptions::credentials,
// CacheServerOptions::credentials): insecure when
// options.cert_file is empty, else TLS (mutual TLS with client_ca_file) with the files
// watched for changes. INVALID_ARGUMENT naming the file or option when a file is bad
// (see LoadKeyCertPair; a CA file must hold at least one certificate), a key or
// certificate is given without the other, or refresh_interval is out of range.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options);

// Credentials for grpc::CreateCustomChannel: insecure when options.ca_file is empty,
// else TLS verifying the server against ca_file (and presenting cert_file when set),
// the files watched for changes. INVALID_ARGUMENT as for MakeServerCredentials, and
// when cert_file/key_file are set without ca_file.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& options);

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_TLS_CREDENTIALS_H_
