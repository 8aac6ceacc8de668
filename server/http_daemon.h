// A GNU libmicrohttpd daemon listening on HOST:PORT, as every HTTP port of kvserve
// opens one (/metrics, the OpenAI-compatible API): epoll on a small pool of worker
// threads (a connection holds a socket, not a thread), idle connections closed after a
// timeout, a connection limit, optional HTTPS, an explicit thread stack size, and
// optionally suspend/resume (a response produced later, on another thread).
//
// Threading: Start and the destructor from one thread; the callbacks run on the worker
// threads.
#ifndef KVSERVE_SERVER_HTTP_DAEMON_H_
#define KVSERVE_SERVER_HTTP_DAEMON_H_

#include <microhttpd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvserve::server {

struct HttpDaemonOptions {
  // "HOST:PORT" (port 0 = any free port; "[::1]:8080" for IPv6).
  std::string address;
  // The flag that sets `address`, for error messages ("metrics-listen").
  std::string option_name;
  // Worker threads, each polling its share of the connections.
  int32_t worker_threads = 2;
  // A connection idle this long (no request, or a request that stalls) is closed. Whole
  // seconds, >= 1 s.
  absl::Duration idle_timeout = absl::Seconds(10);
  // Open connections at once; more are refused at accept.
  int32_t max_connections = 256;
  // HTTPS: the PEM certificate chain and its unencrypted key; both empty = plain HTTP.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // Stack of each worker thread.
  size_t thread_stack_bytes = size_t{8} << 20;
  // MHD_ALLOW_SUSPEND_RESUME: handlers may suspend a connection and another thread
  // resume it. Every suspended connection must be resumed before the daemon stops.
  bool suspend_resume = false;
  // Called when a request ends (any way); null = none.
  MHD_RequestCompletedCallback on_completed = nullptr;
  // Called when a connection opens or closes; null = none.
  MHD_NotifyConnectionCallback on_connection = nullptr;
};

class HttpDaemon {
 public:
  // Listens on options.address and calls `handler` with `cls` for every request (and
  // the options' callbacks with `cls`). INVALID_ARGUMENT for an unresolvable host,
  // FAILED_PRECONDITION for HTTPS without TLS support, UNAVAILABLE when the address
  // cannot be bound. Options are checked by the caller (each names its own flags).
  static absl::StatusOr<std::unique_ptr<HttpDaemon>> Start(const HttpDaemonOptions& options,
                                                           MHD_AccessHandlerCallback handler,
                                                           void* cls);
  // Stops accepting, closes every connection and joins the workers.
  ~HttpDaemon();
  HttpDaemon(const HttpDaemon&) = delete;
  HttpDaemon& operator=(const HttpDaemon&) = delete;

  // Stops accepting new connections; the open ones go on. Idempotent.
  void Quiesce();
  // The bound port.
  int port() const { return port_; }

 private:
  HttpDaemon() = default;

  // libmicrohttpd keeps pointers to the PEM text.
  std::string tls_cert_pem_;
  std::string tls_key_pem_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
  bool quiesced_ = false;
};

// Checks the options shared by every HTTP port, naming the flags `prefix` + "-threads",
// "-timeout" / "-idle-timeout" (as `timeout_flag`), "-max-connections".
absl::Status ValidateHttpDaemonOptions(const HttpDaemonOptions& options, const std::string& prefix,
                                       const std::string& timeout_flag);

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_HTTP_DAEMON_H_
