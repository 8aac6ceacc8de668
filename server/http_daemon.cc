#include "server/http_daemon.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/host_port.h"

namespace kvserve::server {

absl::Status ValidateHttpDaemonOptions(const HttpDaemonOptions& options, const std::string& prefix,
                                       const std::string& timeout_flag) {
  if (absl::StatusOr<HostPort> hp = ParseHostPort(options.address, options.option_name); !hp.ok()) {
    return hp.status();
  }
  if (options.worker_threads < 1 || options.worker_threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "-threads must be in [1, 64], got ", options.worker_threads));
  }
  if (options.idle_timeout < absl::Seconds(1) || options.idle_timeout > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat(timeout_flag, " must be in [1s, 1h]"));
  }
  if (options.max_connections < options.worker_threads || options.max_connections > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "-max-connections must be in [", prefix,
                                                   "-threads, 65536], got ",
                                                   options.max_connections));
  }
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ": the TLS certificate and key go together"));
  }
  if (options.thread_stack_bytes < (size_t{256} << 10)) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ": the worker thread stack must be >= 256 KiB"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpDaemon>> HttpDaemon::Start(const HttpDaemonOptions& options,
                                                              MHD_AccessHandlerCallback handler,
                                                              void* cls) {
  absl::StatusOr<HostPort> hp = ParseHostPort(options.address, options.option_name);
  if (!hp.ok()) return hp.status();
  const bool tls = !options.tls_cert_pem.empty();
  if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
    return absl::FailedPreconditionError(absl::StrCat(
        options.option_name, ": HTTPS asked for, but libmicrohttpd was built without TLS"));
  }

  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* resolved = nullptr;
  const std::string port = std::to_string(hp->port);
  if (const int rc = getaddrinfo(hp->host.c_str(), port.c_str(), &hints, &resolved); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(options.option_name, ": cannot resolve \"",
                                                   hp->host, "\": ", gai_strerror(rc)));
  }
  const bool ipv6 = resolved->ai_family == AF_INET6;

  std::unique_ptr<HttpDaemon> daemon(new HttpDaemon());
  // No MHD_USE_ERROR_LOG: what remote clients get wrong is not worth a log line each.
  // MHD_USE_ITC: Quiesce (and resuming a connection) wake the workers at once.
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC;
  if (ipv6) flags |= MHD_USE_IPv6;
  if (options.suspend_resume) flags |= MHD_ALLOW_SUSPEND_RESUME;
  daemon->tls_cert_pem_ = options.tls_cert_pem;
  daemon->tls_key_pem_ = options.tls_key_pem;
  std::vector<MHD_OptionItem> extra;
  if (tls) {
    flags |= MHD_USE_TLS;
    extra.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, daemon->tls_cert_pem_.data()});
    extra.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, daemon->tls_key_pem_.data()});
  }
  if (options.on_completed != nullptr) {
    extra.push_back(
        {MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(options.on_completed), cls});
  }
  if (options.on_connection != nullptr) {
    extra.push_back(
        {MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(options.on_connection), cls});
  }
  extra.push_back({MHD_OPTION_END, 0, nullptr});
  daemon->daemon_ = MHD_start_daemon(
      flags, /*port=*/static_cast<uint16_t>(hp->port), /*apc=*/nullptr, /*apc_cls=*/nullptr,
      handler, cls,                             //
      MHD_OPTION_SOCK_ADDR, resolved->ai_addr,  //
      MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned int>(options.worker_threads),
      MHD_OPTION_CONNECTION_TIMEOUT,
      static_cast<unsigned int>(absl::ToInt64Seconds(options.idle_timeout)),
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(options.max_connections),
      MHD_OPTION_THREAD_STACK_SIZE, options.thread_stack_bytes,  //
      MHD_OPTION_ARRAY, extra.data(),                            //
      MHD_OPTION_END);
  freeaddrinfo(resolved);
  if (daemon->daemon_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(options.option_name, ": cannot listen on ",
                                               options.address,
                                               tls ? " (address in use or not local, or the "
                                                     "TLS certificate or key was refused?)"
                                                   : " (address in use or not local?)"));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  daemon->port_ = info != nullptr ? info->port : 0;
  if (daemon->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat(options.option_name, ": no listening port for ", options.address));
  }
  return daemon;
}

void HttpDaemon::Quiesce() {
  if (daemon_ == nullptr || quiesced_) return;
  quiesced_ = true;
  const MHD_socket fd = MHD_quiesce_daemon(daemon_);
  if (fd != MHD_INVALID_SOCKET) close(fd);
}

HttpDaemon::~HttpDaemon() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace kvserve::server
