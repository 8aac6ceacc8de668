// The load generator's requests over kvserve's OpenAI-compatible HTTP API: each call is a
// streamed POST /v1/chat/completions or /v1/completions (client/openai_stream.h for the
// body and the chunks) whose server-sent events (client/sse_parser.h) are read as they
// come, on libcurl (HTTPS when Options::tls_ca_file is set).
//
// As the gRPC side (GrpcStreamSource over a Client), a call runs on the thread that
// calls Next(): the call's libcurl multi handle is polled there, so a thread-per-stream
// load generator measures both protocols the same way. A call borrows a connection
// (libcurl handles and their HTTP/1.1 keep-alive connection) from the source's pool and
// gives it back at its end, so a worker's calls reuse one connection as gRPC's reuse
// their channel; a cancelled call's connection is closed.
//
// Unlike the Client, a call is not retried; a failure is its status (HTTP statuses as
// HttpErrorStatus maps them; connection failures UNAVAILABLE; the deadline
// DEADLINE_EXCEEDED; a stream that ends without "data: [DONE]" UNAVAILABLE). A 429 or
// 503 answer's Retry-After header sets CallInfo::retry_hint and retry_after.
//
// Threading: the source is thread-safe; a call as StreamCall says. The source must
// outlive its calls.
#ifndef KVSERVE_CLIENT_HTTP_STREAM_SOURCE_H_
#define KVSERVE_CLIENT_HTTP_STREAM_SOURCE_H_

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/openai_stream.h"
#include "client/sse_parser.h"
#include "client/stream_source.h"

namespace kvserve::client::bench {

class HttpStreamSource : public StreamSource {
 public:
  struct Options {
    // The server's HTTP listener, HOST:PORT (kvserve --http-listen). Required.
    std::string target;
    // Which endpoint each request goes to. Default chat.
    HttpEndpoint endpoint = HttpEndpoint::kChat;
    // The "model" of every request; empty = the first model GET /v1/models lists (the
    // served name). Default empty.
    std::string model;
    // HTTPS when not empty: PEM CA file the server's certificate must chain to (its SAN
    // must name the target host), as kvserve-cli's --tls-ca. Default empty (plain HTTP).
    std::string tls_ca_file;
    // Mutual TLS: PEM client certificate and its key (with tls_ca_file). Default empty.
    std::string tls_cert_file;
    std::string tls_key_file;
    // Sent as "Authorization: Bearer TOKEN" when not empty. Default empty.
    std::string bearer_token;
    // Deadline of a call, from its first Next() to its end. Default 60 s.
    absl::Duration timeout = absl::Seconds(60);
    // How long a connection may take to establish. Default 5 s.
    absl::Duration connect_timeout = absl::Seconds(5);
    // Largest server-sent event accepted (SseParser). Default 1 MiB.
    size_t max_event_bytes = SseParser::kDefaultMaxEventBytes;
    // Largest error body kept for the status message. Default 64 KiB.
    size_t max_error_body_bytes = size_t{64} << 10;
  };

  // A source for `options`; it asks GET /v1/models once (the model, when not given, and
  // that the server answers): INVALID_ARGUMENT for no target, the answer's status when
  // it fails (UNAVAILABLE when nothing answers within connect_timeout), FAILED_PRECONDITION
  // when it lists no model.
  static absl::StatusOr<std::unique_ptr<HttpStreamSource>> Create(Options options);
  ~HttpStreamSource() override;

  std::unique_ptr<StreamCall> Start(const v1::GenerateRequest& request) const override;

  // The model every request names.
  const std::string& model() const { return options_.model; }

  // libcurl handles of one connection (opaque outside http_stream_source.cc).
  struct Connection;

  // A connection from the pool (a new one when it is empty), and back.
  std::unique_ptr<Connection> Borrow() const;
  void Return(std::unique_ptr<Connection> connection) const;

  const Options& options() const { return options_; }

 private:
  explicit HttpStreamSource(Options options);

  Options options_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Connection>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::client::bench

#endif  // KVSERVE_CLIENT_HTTP_STREAM_SOURCE_H_
