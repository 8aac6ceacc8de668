#include "server/tls_credentials.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "openssl/bio.h"
#include "openssl/err.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/x509.h"

namespace kvserve::server {
namespace {

// Larger files are not certificates or keys we would use (a chain is a few KiB).
constexpr int64_t kMaxPemFileBytes = int64_t{1} << 20;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

// Never prompts for a passphrase (OpenSSL's default callback reads the terminal): an
// encrypted key simply fails to load.
int NoPassphrase(char*, int, int, void*) { return -1; }

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no file given"));
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, ": cannot read (", std::strerror(errno), ")"));
  }
  std::string data;
  char buffer[16384];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    data.append(buffer, static_cast<size_t>(in.gcount()));
    if (static_cast<int64_t>(data.size()) > kMaxPemFileBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", path, ": larger than ", kMaxPemFileBytes, " bytes"));
    }
  }
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": read error"));
  }
  return data;
}

std::unique_ptr<BIO, BioFree> MemBio(const std::string& data) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
}

// The first PEM certificate of `pem` (null when there is none); `count` gets how many
// there are.
std::unique_ptr<X509, X509Free> ParseCertificates(const std::string& pem, int* count) {
  std::unique_ptr<BIO, BioFree> bio = MemBio(pem);
  std::unique_ptr<X509, X509Free> first;
  *count = 0;
  while (bio != nullptr) {
    std::unique_ptr<X509, X509Free> cert(
        PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
    if (cert == nullptr) break;
    if (first == nullptr) first = std::move(cert);
    ++*count;
  }
  ERR_clear_error();  // the end of the input shows as an error; nothing to report
  return first;
}

// Reads a file that must hold at least one PEM certificate.
absl::StatusOr<std::string> LoadCertificates(const std::string& path, const char* what) {
  absl::StatusOr<std::string> pem = ReadPemFile(path, what);
  if (!pem.ok()) return pem.status();
  int count = 0;
  if (ParseCertificates(*pem, &count) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": holds no PEM certificate"));
  }
  return pem;
}

absl::StatusOr<unsigned int> RefreshSeconds(absl::Duration interval) {
  if (interval < absl::Seconds(1) || interval > absl::Hours(24 * 365) ||
      interval != absl::Seconds(absl::ToInt64Seconds(interval))) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS refresh interval must be whole seconds in [1s, 8760h], got ",
                     absl::FormatDuration(interval)));
  }
  return static_cast<unsigned int>(absl::ToInt64Seconds(interval));
}

}  // namespace

absl::StatusOr<PemKeyCertPair> LoadKeyCertPair(const std::string& cert_file,
                                               const std::string& key_file) {
  PemKeyCertPair pair;
  absl::StatusOr<std::string> cert = ReadPemFile(cert_file, "TLS certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile(key_file, "TLS key");
  if (!key.ok()) return key.status();
  int count = 0;
  std::unique_ptr<X509, X509Free> leaf = ParseCertificates(*cert, &count);
  if (leaf == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS certificate ", cert_file, ": holds no PEM certificate"));
  }
  std::unique_ptr<BIO, BioFree> key_bio = MemBio(*key);
  std::unique_ptr<EVP_PKEY, PkeyFree> pkey(
      key_bio == nullptr ? nullptr
                         : PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  ERR_clear_error();
  if (pkey == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS key ", key_file, ": holds no unencrypted PEM private key"));
  }
  const bool matches = X509_check_private_key(leaf.get(), pkey.get()) == 1;
  ERR_clear_error();
  if (!matches) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS key ", key_file, " does not match the certificate in ", cert_file));
  }
  pair.cert_pem = *std::move(cert);
  pair.key_pem = *std::move(key);
  return pair;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options) {
  if (options.cert_file.empty()) {
    if (!options.key_file.empty() || !options.client_ca_file.empty()) {
      return absl::InvalidArgumentError("TLS: a key or client CA needs a certificate");
    }
    return grpc::InsecureServerCredentials();
  }
  if (options.key_file.empty())
    return absl::InvalidArgumentError("TLS: a certificate needs its key");
  absl::StatusOr<unsigned int> refresh_seconds = RefreshSeconds(options.refresh_interval);
  if (!refresh_seconds.ok()) return refresh_seconds.status();
  if (absl::StatusOr<PemKeyCertPair> pair = LoadKeyCertPair(options.cert_file, options.key_file);
      !pair.ok()) {
    return pair.status();
  }
  const bool mutual = !options.client_ca_file.empty();
  if (mutual) {
    absl::StatusOr<std::string> ca = LoadCertificates(options.client_ca_file, "TLS client CA");
    if (!ca.ok()) return ca.status();
  }
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.key_file, options.cert_file, mutual ? options.client_ca_file : "", *refresh_seconds);
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (mutual) {
    tls.watch_root_certs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& options) {
  const bool identity = !options.cert_file.empty() || !options.key_file.empty();
  if (options.ca_file.empty()) {
    if (identity) return absl::InvalidArgumentError("TLS: a client certificate or key needs a CA");
    return grpc::InsecureChannelCredentials();
  }
  if (identity && (options.cert_file.empty() || options.key_file.empty())) {
    return absl::InvalidArgumentError("TLS: a client certificate and key go together");
  }
  absl::StatusOr<unsigned int> refresh_seconds = RefreshSeconds(options.refresh_interval);
  if (!refresh_seconds.ok()) return refresh_seconds.status();
  absl::StatusOr<std::string> ca = LoadCertificates(options.ca_file, "TLS CA");
  if (!ca.ok()) return ca.status();
  std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider> provider;
  if (identity) {
    if (absl::StatusOr<PemKeyCertPair> pair = LoadKeyCertPair(options.cert_file, options.key_file);
        !pair.ok()) {
      return pair.status();
    }
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        options.key_file, options.cert_file, options.ca_file, *refresh_seconds);
  } else {
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        options.ca_file, *refresh_seconds);
  }
  grpc::experimental::TlsChannelCredentialsOptions tls;
  tls.set_certificate_provider(provider);
  tls.watch_root_certs();
  if (identity) tls.watch_identity_key_cert_pairs();
  return grpc::experimental::TlsCredentials(tls);
}

}  // namespace kvserve::server
