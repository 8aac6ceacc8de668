#include "server/metrics_http_server.h"

#include <microhttpd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/http_daemon.h"

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

namespace {

// Only what /metrics uses (no callbacks, no suspension), whatever the caller set.
HttpDaemonOptions DaemonOptions(const MetricsHttpOptions& options) {
  HttpDaemonOptions daemon = options;
  daemon.option_name = "metrics-listen";
  daemon.suspend_resume = false;
  daemon.on_completed = nullptr;
  daemon.on_connection = nullptr;
  return daemon;
}

}  // namespace

absl::Status ValidateMetricsHttpOptions(const MetricsHttpOptions& options) {
  return ValidateHttpDaemonOptions(DaemonOptions(options), "metrics", "metrics-timeout");
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpOptions& options, const MetricsSource& metrics) {
  if (absl::Status s = ValidateMetricsHttpOptions(options); !s.ok()) return s;
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(metrics));
  absl::StatusOr<std::unique_ptr<HttpDaemon>> daemon = HttpDaemon::Start(
      DaemonOptions(options), &HandleRequest, const_cast<MetricsSource*>(&server->metrics_));
  if (!daemon.ok()) return daemon.status();
  server->daemon_ = *std::move(daemon);
  return server;
}

MetricsHttpServer::~MetricsHttpServer() = default;

}  // namespace kvserve::server
