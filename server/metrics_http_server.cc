#include "server/metrics_http_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/host_port.h"

namespace kvserve::server {
namespace {

constexpr char kMetricsPath[] = "/metrics";
constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

MHD_Result Reply(MHD_Connection* connection, unsigned int status, const std::string& body,
                 const char* content_type, const char* allow = nullptr) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;  // out of memory: MHD closes the connection
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (allow != nullptr) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
  const MHD_Result result = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return result;
}

// libmicrohttpd's access handler: one call per request (the answer is queued on the
// first call, so a request body is never read; MHD then closes that connection).
MHD_Result HandleRequest(void* cls, MHD_Connection* connection, const char* url, const char* method,
                         const char* /*version*/, const char* /*upload_data*/,
                         size_t* /*upload_data_size*/, void** /*request_state*/) {
  const MetricsSource& metrics = *static_cast<const MetricsSource*>(cls);
  if (std::strcmp(url, kMetricsPath) != 0) {
    return Reply(connection, MHD_HTTP_NOT_FOUND, "not found; metrics are at /metrics\n",
                 "text/plain; charset=utf-8");
  }
  const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0;
  if (!get && std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n",
                 "text/plain; charset=utf-8", "GET, HEAD");
  }
  // HEAD: MHD sends the headers of this response without its body.
  return Reply(connection, MHD_HTTP_OK, metrics.SerializeText(), kContentType);
}

}  // namespace

absl::Status ValidateMetricsHttpOptions(const MetricsHttpOptions& options) {
  if (absl::StatusOr<HostPort> hp = ParseHostPort(options.address, "metrics-listen"); !hp.ok()) {
    return hp.status();
  }
  if (options.worker_threads < 1 || options.worker_threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics-threads must be in [1, 64], got ", options.worker_threads));
  }
  if (options.idle_timeout < absl::Seconds(1) || options.idle_timeout > absl::Hours(1)) {
    return absl::InvalidArgumentError("metrics-timeout must be in [1s, 1h]");
  }
  if (options.max_connections < options.worker_threads || options.max_connections > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics-max-connections must be in [metrics-threads, 65536], got ",
                     options.max_connections));
  }
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("metrics-tls-cert and metrics-tls-key go together");
  }
  if (options.thread_stack_bytes < (size_t{256} << 10)) {
    return absl::InvalidArgumentError("the metrics thread stack must be >= 256 KiB");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpOptions& options, const MetricsSource& metrics) {
  if (absl::Status s = ValidateMetricsHttpOptions(options); !s.ok()) return s;
  const HostPort hp = *ParseHostPort(options.address, "metrics-listen");
  const bool tls = !options.tls_cert_pem.empty();
  if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
    return absl::FailedPreconditionError(
        "metrics: HTTPS asked for, but libmicrohttpd was built without TLS support");
  }

  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* resolved = nullptr;
  const std::string port = std::to_string(hp.port);
  if (const int rc = getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &resolved); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics-listen: cannot resolve \"", hp.host, "\": ", gai_strerror(rc)));
  }
  const bool ipv6 = resolved->ai_family == AF_INET6;

  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(metrics));
  // No MHD_USE_ERROR_LOG: what remote clients get wrong is not worth a log line each.
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
  if (ipv6) flags |= MHD_USE_IPv6;
  // The PEM text stays with the server: libmicrohttpd keeps pointers to it.
  server->tls_cert_pem_ = options.tls_cert_pem;
  server->tls_key_pem_ = options.tls_key_pem;
  std::vector<MHD_OptionItem> tls_options;
  if (tls) {
    flags |= MHD_USE_TLS;
    tls_options.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, server->tls_cert_pem_.data()});
    tls_options.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, server->tls_key_pem_.data()});
  }
  tls_options.push_back({MHD_OPTION_END, 0, nullptr});
  server->daemon_ = MHD_start_daemon(
      flags, /*port=*/static_cast<uint16_t>(hp.port), /*apc=*/nullptr, /*apc_cls=*/nullptr,
      &HandleRequest, const_cast<MetricsSource*>(&server->metrics_),  //
      MHD_OPTION_SOCK_ADDR, resolved->ai_addr,                        //
      MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned int>(options.worker_threads),
      MHD_OPTION_CONNECTION_TIMEOUT,
      static_cast<unsigned int>(absl::ToInt64Seconds(options.idle_timeout)),
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(options.max_connections),
      MHD_OPTION_THREAD_STACK_SIZE, options.thread_stack_bytes,  //
      MHD_OPTION_ARRAY, tls_options.data(),                      //
      MHD_OPTION_END);
  freeaddrinfo(resolved);
  if (server->daemon_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", options.address,
                                               tls ? " (address in use or not local, or the "
                                                     "TLS certificate or key was refused?)"
                                                   : " (address in use or not local?)"));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  server->port_ = info != nullptr ? info->port : 0;
  if (server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("metrics: no listening port for ", options.address));
  }
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace kvserve::server
