// The OpenAI-compatible HTTP API: kvserve's second front beside gRPC, on GNU
// libmicrohttpd (HTTP/1.1 keep-alive, chunked server-sent events, HTTPS). Endpoints:
//   POST /v1/chat/completions, POST /v1/completions   (streamed or not; n choices)
//   GET  /v1/models, GET /v1/models/{id}
//   GET  /health                                       (200 serving, 503 loading/draining)
// Bodies are read by service/openai_request.h and written by service/openai_response.h.
// Every generation goes through InferenceService (the same admission and bearer
// tokens, validation, limits, engine, metrics and drain as gRPC). Docs: docs/http-api.md.
//
// Threading: requests are handled on the daemon's worker threads (epoll; a waiting
// request holds no thread: its connection is suspended until the engine's sink, on the
// engine step thread, resumes it). Response JSON is written on the worker threads, not
// the step thread. A client that disconnects cancels its generations (noticed at the
// next write of a stream, or when the answer of a non-streamed request is sent).
// Lifetime: destroy only after the engine has finished every generation (Server::Drain
// shuts the engine down first): a suspended connection must be resumed before the
// daemon stops.
#ifndef KVSERVE_SERVICE_HTTP_API_H_
#define KVSERVE_SERVICE_HTTP_API_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/http_daemon.h"
#include "server/http_request_deadlines.h"
#include "service/inference_service.h"
#include "service/metrics.h"
#include "service/openai_request.h"

namespace kvserve::service {

struct HttpApiOptions {
  // The listener (address default 127.0.0.1:8080; flags --http-listen, --http-threads,
  // --http-idle-timeout, --http-max-connections; HTTPS from --tls-cert/--tls-key).
  server::HttpDaemonOptions daemon = {.address = "127.0.0.1:8080",
                                      .option_name = "http-listen",
                                      .worker_threads = 2,
                                      .idle_timeout = absl::Seconds(30),
                                      .max_connections = 2048};
  // Largest request body; larger is 413. Default 4 MiB (--max-message-bytes, as gRPC's).
  int64_t max_body_bytes = int64_t{4} << 20;
  // The model id requests name and /v1/models lists (--served-model-name).
  std::string served_model_name = "default";
  // n and nesting limits (--max-n).
  OpenAiLimits limits;
};

// INVALID_ARGUMENT naming the flag.
absl::Status ValidateHttpApiOptions(const HttpApiOptions& options);

class HttpApi {
 public:
  // Listens and serves through `service` and `metrics` (both must outlive the API).
  // Errors of HttpDaemon::Start and ValidateHttpApiOptions.
  static absl::StatusOr<std::unique_ptr<HttpApi>> Start(const HttpApiOptions& options,
                                                        InferenceService* service,
                                                        Metrics* metrics);
  ~HttpApi();
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  int port() const { return daemon_->port(); }
  // Waits until every request that started a generation has sent its answer (after
  // the engine finished them), or `deadline`.
  void WaitAnswered(absl::Time deadline);

  class Exchange;  // one request (http_api.cc)

 private:
  HttpApi(const HttpApiOptions& options, InferenceService* service, Metrics* metrics);

  const HttpApiOptions options_;
  InferenceService* const service_;
  Metrics* const metrics_;
  const int64_t started_unix_;
  std::atomic<int> generating_{0};  // exchanges that submitted and did not complete
  // Outlives the daemon (whose callbacks report to it).
  std::unique_ptr<server::HttpRequestDeadlines> deadlines_;
  std::unique_ptr<server::HttpDaemon> daemon_;

  friend class HttpApiCallbacks;
};

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_HTTP_API_H_
