// The /metrics HTTP endpoint, on GNU libmicrohttpd.
//
// Serves Metrics::SerializeText() at GET (and HEAD) /metrics. Every other request gets a
// proper HTTP status and nothing else happens: another path 404, another method on
// /metrics 405 (with Allow), a malformed request 400, an over-long request line or
// header 414/431 (libmicrohttpd answers those itself).
//
// Robustness (the port is reachable by whatever reaches the pod): connections are
// multiplexed with epoll on a small pool of worker threads, so a client that opens a
// connection and never finishes its request holds a socket, not a worker; such a
// connection is closed after `idle_timeout`. The workers get `thread_stack_bytes` of
// stack, set explicitly, so libraries with large thread-local storage (glibc takes
// static TLS out of each new thread's stack) cannot overflow them.
//
// Threading: Start and the destructor from one thread; scrapes call the MetricsSource on
// the worker threads.
#ifndef KVSERVE_SERVER_METRICS_HTTP_SERVER_H_
#define KVSERVE_SERVER_METRICS_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/http_daemon.h"

namespace kvserve::server {

// What /metrics serves: the Prometheus text exposition of some set of metrics
// (service::Metrics for kvserve, cachesvc::CacheMetrics for kvserve-cache).
// Threading: SerializeText is called from the endpoint's worker threads at once.
class MetricsSource {
 public:
  virtual ~MetricsSource() = default;
  virtual std::string SerializeText() const = 0;
};

// The endpoint's listener (server/http_daemon.h) with its defaults: address
// 127.0.0.1:9464, 2 worker threads, idle timeout 10 s (Prometheus' default scrape
// timeout), 256 connections, plain HTTP (HTTPS PEM text from --metrics-tls-*; not
// reloaded: a new certificate needs a restart), 8 MiB worker stacks. Callbacks and
// suspend/resume are not used here.
struct MetricsHttpOptions : HttpDaemonOptions {
  // `listen`: the address ("" = no endpoint, for the callers that make it optional).
  explicit MetricsHttpOptions(std::string listen = "127.0.0.1:9464") {
    address = std::move(listen);
    option_name = "metrics-listen";
  }
};

// INVALID_ARGUMENT naming the option ("metrics-threads", ...) when out of range.
absl::Status ValidateMetricsHttpOptions(const MetricsHttpOptions& options);

class MetricsHttpServer {
 public:
  // Listens on options.address and serves `metrics`, which must outlive the server.
  // INVALID_ARGUMENT for bad options or an unresolvable host, UNAVAILABLE when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const MetricsHttpOptions& options,
                                                                  const MetricsSource& metrics);
  // Stops accepting, closes every connection and joins the workers.
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port.
  int port() const { return daemon_->port(); }

 private:
  MetricsHttpServer(const MetricsSource& metrics) : metrics_(metrics) {}

  const MetricsSource& metrics_;
  std::unique_ptr<HttpDaemon> daemon_;
};

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_METRICS_HTTP_SERVER_H_
