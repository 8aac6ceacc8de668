#include "client/http_stream_source.h"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvserve::client::bench {

// Invariant: `easy` is added to `multi` only while a call streams on it.
struct HttpStreamSource::Connection {
  Connection() : multi(curl_multi_init()), easy(curl_easy_init()) {}
  ~Connection() {
    if (easy != nullptr) curl_easy_cleanup(easy);
    if (multi != nullptr) curl_multi_cleanup(multi);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  CURLM* const multi;
  CURL* const easy;
};

namespace {

// "http://TARGET/PATH", or https with a CA.
std::string Url(const HttpStreamSource::Options& o, std::string_view path) {
  return absl::StrCat(o.tls_ca_file.empty() ? "http://" : "https://", o.target, std::string(path));
}

// The libcurl options every transfer of a source has.
void SetCommonOptions(const HttpStreamSource::Options& o, CURL* easy) {
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  if (!o.tls_ca_file.empty()) {
    curl_easy_setopt(easy, CURLOPT_CAINFO, o.tls_ca_file.c_str());
    if (!o.tls_cert_file.empty()) {
      curl_easy_setopt(easy, CURLOPT_SSLCERT, o.tls_cert_file.c_str());
      curl_easy_setopt(easy, CURLOPT_SSLKEY, o.tls_key_file.c_str());
    }
  }
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(o.timeout)));
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(o.connect_timeout)));
}

// Headers of a request: JSON in, `accept` out, the bearer token, the session id, and no
// "Expect: 100-continue" (libcurl's default for larger bodies: a round trip more).
curl_slist* RequestHeaders(const HttpStreamSource::Options& o, std::string_view accept,
                           std::string_view session_id) {
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Content-Type: application/json");
  headers = curl_slist_append(headers, absl::StrCat("Accept: ", std::string(accept)).c_str());
  headers = curl_slist_append(headers, "Expect:");
  if (!o.bearer_token.empty()) {
    headers =
        curl_slist_append(headers, absl::StrCat("Authorization: Bearer ", o.bearer_token).c_str());
  }
  if (!session_id.empty()) {
    headers = curl_slist_append(
        headers, absl::StrCat("kvserve-session-id: ", std::string(session_id)).c_str());
  }
  return headers;
}

// A transport failure as a status.
absl::Status CurlStatus(CURLcode code) {
  const std::string message = absl::StrCat("HTTP call: ", curl_easy_strerror(code));
  if (code == CURLE_OPERATION_TIMEDOUT) return absl::DeadlineExceededError(message);
  return absl::UnavailableError(message);
}

// What libcurl received, up to `cap` bytes (the rest is dropped).
struct BoundedText {
  std::string text;
  size_t cap;
  static size_t Write(char* data, size_t size, size_t n, void* self) {
    auto* b = static_cast<BoundedText*>(self);
    b->text.append(data, std::min(size * n, b->cap - std::min(b->cap, b->text.size())));
    return size * n;
  }
};

class HttpStreamCall : public StreamCall {
 public:
  HttpStreamCall(const HttpStreamSource& source, v1::GenerateRequest request)
      : source_(source), request_(std::move(request)), parser_(source.options().max_event_bytes) {}
  ~HttpStreamCall() override {
    if (state_ == State::kStreaming) Finish().IgnoreError();
  }

  bool Next(StreamPiece* piece) override;
  void Cancel() override;
  absl::Status Finish() override;
  const CallInfo& info() const override { return info_; }

 private:
  enum class State { kNotStarted, kStreaming, kDone };

  // Sends the request (the first Next); false when it could not be (final_status_ set).
  bool Begin();
  // The transfer ended with `result`: the call's status.
  absl::Status TransferStatus(CURLcode result) const;
  // Ends the call with `status`; the connection goes back to the pool.
  void End(absl::Status status);
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  static size_t OnBody(char* data, size_t size, size_t n, void* self);
  static size_t OnHeader(char* data, size_t size, size_t n, void* self);
  // Bytes of the answer's body; false to abort the transfer.
  bool Body(std::string_view bytes);

  const HttpStreamSource& source_;
  const v1::GenerateRequest request_;
  State state_ = State::kNotStarted;
  absl::Status final_status_;
  CallInfo info_;

  std::string body_;  // the request's body, alive while libcurl sends it
  curl_slist* headers_ = nullptr;
  SseParser parser_;
  std::vector<std::string> events_;  // scratch of Body
  std::deque<StreamPiece> pending_;  // received, not yet returned by Next
  long http_status_ = 0;             // 0 until the first byte of the body
  std::string error_body_;           // the body of a non-200 answer (bounded)
  absl::Status stream_status_;       // the first failure the stream itself reported
  bool done_seen_ = false;           // "data: [DONE]" came
  std::optional<absl::Duration> retry_after_;

  std::atomic<bool> cancelled_{false};
  // The connection in use (set and cleared under mu_, so that Cancel can wake its poll).
  mutable std::mutex mu_;
  std::unique_ptr<HttpStreamSource::Connection> connection_ ABSL_GUARDED_BY(mu_);
  // connection_'s handles, for the streaming thread (set while state_ is kStreaming).
  CURLM* multi_ = nullptr;
  CURL* easy_ = nullptr;
};

bool HttpStreamCall::Begin() {
  const HttpStreamSource::Options& o = source_.options();
  info_.replica = o.target;
  info_.attempts = 1;
  absl::StatusOr<std::string> body = StreamRequestBody(request_, o.endpoint, source_.model());
  if (!body.ok()) {
    final_status_ = body.status();
    state_ = State::kDone;
    return false;
  }
  body_ = *std::move(body);
  std::unique_ptr<HttpStreamSource::Connection> connection = source_.Borrow();
  if (connection->multi == nullptr || connection->easy == nullptr) {
    final_status_ = absl::ResourceExhaustedError("HTTP call: libcurl could not allocate handles");
    state_ = State::kDone;
    return false;
  }
  multi_ = connection->multi;
  easy_ = connection->easy;
  curl_easy_reset(easy_);
  SetCommonOptions(o, easy_);
  const std::string url = Url(o, HttpEndpointPath(o.endpoint));
  curl_easy_setopt(easy_, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body_.size()));
  curl_easy_setopt(easy_, CURLOPT_POSTFIELDS, body_.data());
  headers_ = RequestHeaders(o, "text/event-stream", request_.session_id());
  curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(easy_, CURLOPT_WRITEFUNCTION, &HttpStreamCall::OnBody);
  curl_easy_setopt(easy_, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(easy_, CURLOPT_HEADERFUNCTION, &HttpStreamCall::OnHeader);
  curl_easy_setopt(easy_, CURLOPT_HEADERDATA, this);
  curl_multi_add_handle(multi_, easy_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    connection_ = std::move(connection);
  }
  state_ = State::kStreaming;
  return true;
}

size_t HttpStreamCall::OnHeader(char* data, size_t size, size_t n, void* self) {
  auto* call = static_cast<HttpStreamCall*>(self);
  const absl::string_view line(data, size * n);
  if (absl::StartsWith(line, "HTTP/")) {
    call->retry_after_.reset();  // a new response (after a 100 Continue)
  } else if (absl::StartsWithIgnoreCase(line, "retry-after:")) {
    int64_t seconds = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(12)), &seconds) && seconds >= 0) {
      call->retry_after_ = absl::Seconds(seconds);
    }
  }
  return size * n;
}

size_t HttpStreamCall::OnBody(char* data, size_t size, size_t n, void* self) {
  return static_cast<HttpStreamCall*>(self)->Body(std::string_view(data, size * n)) ? size * n : 0;
}

bool HttpStreamCall::Body(std::string_view bytes) {
  if (http_status_ == 0) curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &http_status_);
  if (http_status_ != 200) {
    const size_t cap = source_.options().max_error_body_bytes;
    error_body_.append(bytes.substr(0, cap - std::min(cap, error_body_.size())));
    return true;
  }
  events_.clear();
  if (absl::Status s = parser_.Feed(bytes, &events_); !s.ok()) {
    stream_status_ = std::move(s);
    return false;
  }
  for (const std::string& data : events_) {
    if (done_seen_ || !stream_status_.ok()) break;  // nothing counts after the end
    absl::StatusOr<std::optional<StreamPiece>> piece =
        ParseStreamData(data, source_.options().endpoint);
    if (!piece.ok()) {
      stream_status_ = piece.status();
    } else if (!piece->has_value()) {
      done_seen_ = true;
    } else {
      pending_.push_back(**std::move(piece));
    }
  }
  return true;
}

absl::Status HttpStreamCall::TransferStatus(CURLcode result) const {
  if (!stream_status_.ok()) return stream_status_;
  if (result != CURLE_OK) return CurlStatus(result);
  if (http_status_ != 200) return HttpErrorStatus(static_cast<int>(http_status_), error_body_);
  if (!done_seen_) return absl::UnavailableError("HTTP stream ended without data: [DONE]");
  return absl::OkStatus();
}

void HttpStreamCall::End(absl::Status status) {
  curl_multi_remove_handle(multi_, easy_);
  curl_slist_free_all(headers_);
  headers_ = nullptr;
  std::unique_ptr<HttpStreamSource::Connection> connection;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connection = std::move(connection_);
  }
  source_.Return(std::move(connection));
  multi_ = nullptr;
  easy_ = nullptr;
  final_status_ = std::move(status);
  if (!final_status_.ok() && retry_after_.has_value()) {
    info_.retry_hint = retry_after_;
    info_.retry_after = true;
  }
  state_ = State::kDone;
}

bool HttpStreamCall::Next(StreamPiece* piece) {
  if (state_ == State::kNotStarted && !Begin()) return false;
  for (;;) {
    if (!pending_.empty()) {
      *piece = std::move(pending_.front());
      pending_.pop_front();
      return true;
    }
    if (state_ == State::kDone) return false;
    if (cancelled()) {
      End(absl::CancelledError("call cancelled"));
      continue;
    }
    int running = 0;
    if (const CURLMcode mc = curl_multi_perform(multi_, &running); mc != CURLM_OK) {
      End(absl::InternalError(absl::StrCat("HTTP call: ", curl_multi_strerror(mc))));
      continue;
    }
    int queued = 0;
    while (const CURLMsg* m = curl_multi_info_read(multi_, &queued)) {
      if (m->msg == CURLMSG_DONE) {
        End(TransferStatus(m->data.result));
        break;  // multi_ is no longer this call's
      }
    }
    if (state_ == State::kDone || !pending_.empty()) continue;
    curl_multi_poll(multi_, nullptr, 0, /*timeout_ms=*/1000, nullptr);
  }
}

void HttpStreamCall::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_.store(true, std::memory_order_release);
  if (connection_ != nullptr) curl_multi_wakeup(connection_->multi);
}

absl::Status HttpStreamCall::Finish() {
  switch (state_) {
    case State::kNotStarted:
      final_status_ = absl::CancelledError("call cancelled before it started");
      state_ = State::kDone;
      break;
    case State::kStreaming:
      End(absl::CancelledError("call cancelled"));
      break;
    case State::kDone:
      break;
  }
  pending_.clear();
  return final_status_;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpStreamSource>> HttpStreamSource::Create(Options options) {
  if (options.target.empty()) return absl::InvalidArgumentError("--http-target is required");
  if (const CURLcode c = curl_global_init(CURL_GLOBAL_DEFAULT); c != CURLE_OK) {
    return absl::InternalError(absl::StrCat("libcurl: ", curl_easy_strerror(c)));
  }
  // From here the source's destructor owns the curl_global_cleanup.
  std::unique_ptr<HttpStreamSource> source(new HttpStreamSource(std::move(options)));
  const Options& o = source->options_;
  const Connection c;
  if (c.easy == nullptr) return absl::ResourceExhaustedError("libcurl could not allocate a handle");
  BoundedText answer{.text = "", .cap = o.max_error_body_bytes};
  SetCommonOptions(o, c.easy);
  const std::string url = Url(o, "/v1/models");
  curl_easy_setopt(c.easy, CURLOPT_URL, url.c_str());
  curl_slist* headers = RequestHeaders(o, "application/json", "");
  curl_easy_setopt(c.easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c.easy, CURLOPT_WRITEFUNCTION, &BoundedText::Write);
  curl_easy_setopt(c.easy, CURLOPT_WRITEDATA, &answer);
  const CURLcode result = curl_easy_perform(c.easy);
  curl_slist_free_all(headers);
  long status = 0;
  curl_easy_getinfo(c.easy, CURLINFO_RESPONSE_CODE, &status);
  if (result != CURLE_OK) return CurlStatus(result);
  if (status != 200) return HttpErrorStatus(static_cast<int>(status), answer.text);
  if (source->options_.model.empty()) {
    absl::StatusOr<std::string> model = FirstModelId(answer.text);
    if (!model.ok()) return model.status();
    source->options_.model = *std::move(model);
  }
  return source;
}

HttpStreamSource::HttpStreamSource(Options options) : options_(std::move(options)) {}

HttpStreamSource::~HttpStreamSource() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.clear();
  }
  curl_global_cleanup();
}

std::unique_ptr<StreamCall> HttpStreamSource::Start(const v1::GenerateRequest& request) const {
  return std::make_unique<HttpStreamCall>(*this, request);
}

std::unique_ptr<HttpStreamSource::Connection> HttpStreamSource::Borrow() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Connection> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return std::make_unique<Connection>();
}

void HttpStreamSource::Return(std::unique_ptr<Connection> connection) const {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(connection));
}

}  // namespace kvserve::client::bench
