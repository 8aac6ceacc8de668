#include "service/http_api.h"

#include <microhttpd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/secure_random.h"
#include "engine/field_error.h"
#include "service/generate_reactors.h"
#include "service/grpc_status.h"
#include "service/openai_response.h"

namespace kvserve::service {
namespace {

// The header that names a kvserve session (as gRPC's metadata key); the body's
// session_id may say the same.
constexpr char kSessionHeader[] = "kvserve-session-id";
constexpr char kModelsPath[] = "/v1/models";
constexpr size_t kStreamBlockBytes = 16 << 10;
// How often a suspended connection is checked for a client that went away.
constexpr absl::Duration kDisconnectCheck = absl::Seconds(1);

enum class Route { kUnknown, kHealth, kModels, kModel, kChatCompletions, kCompletions };

struct RouteMatch {
  Route route = Route::kUnknown;
  const char* allow = nullptr;  // the method the path takes
  std::string model_id;         // kModel
};

RouteMatch MatchRoute(std::string_view url) {
  if (url == "/v1/chat/completions") return {Route::kChatCompletions, MHD_HTTP_METHOD_POST};
  if (url == "/v1/completions") return {Route::kCompletions, MHD_HTTP_METHOD_POST};
  if (url == kModelsPath) return {Route::kModels, MHD_HTTP_METHOD_GET};
  if (url.starts_with("/v1/models/") && url.size() > std::strlen("/v1/models/")) {
    return {Route::kModel, MHD_HTTP_METHOD_GET, std::string(url.substr(11))};
  }
  if (url == "/health") return {Route::kHealth, MHD_HTTP_METHOD_GET};
  return {};
}

// The `method` label of kvserve_rpc_requests_total for an API route; null for /health
// and unknown paths (counted by status only).
const char* RpcMethod(Route route) {
  switch (route) {
    case Route::kChatCompletions:
      return kHttpChatCompletions;
    case Route::kCompletions:
      return kHttpCompletions;
    case Route::kModels:
    case Route::kModel:
      return kHttpModels;
    default:
      return nullptr;
  }
}

std::string CodeName(absl::StatusCode code) {
  return GrpcCodeName(static_cast<grpc::StatusCode>(code));
}

std::optional<std::string_view> Header(MHD_Connection* connection, const char* name) {
  const char* value = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, name);
  if (value == nullptr) return std::nullopt;
  return std::string_view(value);
}

}  // namespace

// One HTTP request: its body, its generations (one per choice) and its answer. Shared by
// the connection (until the request completes) and the sinks of its generations.
class HttpApi::Exchange : public std::enable_shared_from_this<HttpApi::Exchange> {
 public:
  Exchange(HttpApi* api, MHD_Connection* connection, RouteMatch route)
      : api_(api), connection_(connection), route_(std::move(route)) {}

  // --- Worker thread (the request's handler calls).
  HttpApi* api() const { return api_; }
  const RouteMatch& route() const { return route_; }
  std::string& body() { return body_; }
  bool& too_large() { return too_large_; }
  // An error was queued for this request (maybe before its body arrived).
  bool& refused() { return refused_; }
  bool started() const { return started_; }
  const char* rpc_method() const { return RpcMethod(route_.route); }
  void set_rpc_code(std::string code) { rpc_code_ = std::move(code); }
  const std::string& rpc_code() const { return rpc_code_; }
  ResponseContext& context() { return ctx_; }
  bool streaming() const { return streaming_; }

  // Starts one generation per choice of `request` for `caller` (choice i > 0 samples
  // with seed + i). When one is refused at once, the rest are not started and the
  // started ones cancelled; Continue answers the error.
  void Submit(const InferenceService::Caller& caller, const OpenAiRequest& request,
              const std::string& echo_text, const std::shared_ptr<Exchange>& self);
  // After Submit and after every resume: answers (or starts the stream) when there is
  // something to answer, else suspends the connection until a sink resumes it.
  MHD_Result Continue();

  // The stream's content reader (MHD_ContentReaderCallback).
  static ssize_t ReadStream(void* cls, uint64_t pos, char* buf, size_t max);

  // The request ended (any way): no more resumes; generations still running are
  // cancelled. Returns true when a generation was cut short.
  bool Close();

  // --- Engine step thread (the sinks), or the worker thread for a refusal.
  void OnToken(int32_t index, const engine::TokenEvent& event);
  void OnFinish(int32_t index, const absl::Status& status, engine::FinishReason reason,
                const engine::Usage& usage);

 private:
  struct Choice {
    ChoiceOutput pending;  // the output not yet written (all of it when not streamed)
    std::shared_ptr<CancelLink> link;
    bool finished = false;
    bool first_sent = false;
    bool final_sent = false;
  };

  // Resumes a suspended connection (the sinks' way to hand over output): at once, or for
  // a stream's output no earlier than next_write_ (one write per
  // InferenceService::Options::stream_flush_interval, as gRPC streams are paced: tokens
  // produced meanwhile go out together). `now`: also a stream's output at once.
  void WakeLocked(bool now = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the choices' new output into stream_ as events (worker thread).
  void FormatLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  MHD_Result StartStream();
  // While the connection is suspended (an answer or a stream's first output awaited),
  // looks every kDisconnectCheck whether the client closed it (libmicrohttpd does not
  // watch suspended connections), and if so cancels the generations.
  void WatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  HttpApi* const api_;
  MHD_Connection* const connection_;
  const RouteMatch route_;
  std::string body_;
  bool too_large_ = false;
  bool refused_ = false;
  bool started_ = false;
  std::string rpc_code_;
  ResponseContext ctx_;
  bool streaming_ = false;

  std::mutex mu_;
  std::vector<Choice> choices_ ABSL_GUARDED_BY(mu_);
  int32_t finished_ ABSL_GUARDED_BY(mu_) = 0;
  engine::Usage usage_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> failure_ ABSL_GUARDED_BY(mu_);
  bool suspended_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_started_ ABSL_GUARDED_BY(mu_) = false;
  bool tail_sent_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time next_write_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool wake_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  bool watch_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  std::string stream_ ABSL_GUARDED_BY(mu_);  // events not yet taken by the daemon
};

namespace {

// The engine sink of one choice.
class ChoiceSink final : public GenerationSink {
 public:
  ChoiceSink(GenerationHost* host, std::shared_ptr<HttpApi::Exchange> exchange, int32_t index)
      : GenerationSink(host, /*logprobs=*/true, absl::InfiniteFuture()),
        exchange_(std::move(exchange)),
        index_(index) {}

 private:
  void Deliver(const engine::TokenEvent& event) override { exchange_->OnToken(index_, event); }
  void Finish(const absl::Status& final_status, engine::FinishReason reason,
              const engine::Usage& usage) override {
    exchange_->OnFinish(index_, final_status, reason, usage);
    host_->GenerationEnded();
  }

  const std::shared_ptr<HttpApi::Exchange> exchange_;
  const int32_t index_;
};

// One choice as InferenceService::SubmitGeneration sees it.
class ChoiceCall final : public GenerationCall {
 public:
  ChoiceCall(GenerationHost* host, std::shared_ptr<HttpApi::Exchange> exchange, int32_t index)
      : host_(host), exchange_(std::move(exchange)), index_(index) {}

  void Reject(const absl::Status& status) override {
    exchange_->OnFinish(index_, status, engine::FinishReason::kError, engine::Usage());
  }
  std::shared_ptr<engine::RequestSink> NewSink(bool /*logprobs*/) override {
    return std::make_shared<ChoiceSink>(host_, exchange_, index_);
  }

 private:
  GenerationHost* const host_;
  const std::shared_ptr<HttpApi::Exchange> exchange_;
  const int32_t index_;
};

}  // namespace

void HttpApi::Exchange::Submit(const InferenceService::Caller& caller, const OpenAiRequest& request,
                               const std::string& echo_text,
                               const std::shared_ptr<Exchange>& self) {
  streaming_ = request.stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    choices_.resize(request.n);
    for (Choice& c : choices_) c.pending.text = echo_text;
  }
  started_ = true;
  api_->generating_.fetch_add(1);
  InferenceService& service = *api_->service_;
  GenerationHost* host = service.generation_host();
  // Converted once (tokenizing or rendering a long prompt is the costly part), submitted
  // once per choice.
  absl::StatusOr<engine::Request> prepared =
      service.PrepareGeneration(caller, absl::InfiniteFuture(), request.generate);
  for (int32_t i = 0; i < request.n; ++i) {
    ChoiceCall call(host, self, i);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failure_.has_value()) {
        // The rest never start; OnFinish cancelled the ones that did.
        for (int32_t j = i; j < request.n; ++j) {
          choices_[j].finished = true;
          ++finished_;
        }
        return;
      }
      choices_[i].link = call.cancel_link();
    }
    if (!prepared.ok()) {
      call.Reject(prepared.status());
      continue;
    }
    engine::Request choice = *prepared;
    if (i > 0 && choice.sampling.seed.has_value()) *choice.sampling.seed += i;
    service.SubmitPrepared(caller, std::move(choice), ctx_.logprobs, &call);
  }
}

void HttpApi::Exchange::OnToken(int32_t index, const engine::TokenEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  ChoiceOutput& out = choices_[index].pending;
  out.text += event.text;
  if (ctx_.logprobs && event.token != engine::kTextOnlyToken) out.tokens.push_back(event);
  WakeLocked();
}

void HttpApi::Exchange::OnFinish(int32_t index, const absl::Status& status,
                                 engine::FinishReason reason, const engine::Usage& usage) {
  std::vector<std::shared_ptr<CancelLink>> cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Choice& c = choices_[index];
    c.finished = true;
    c.pending.finish = reason;
    ++finished_;
    if (status.ok()) {
      if (index == 0 || usage_.prompt_tokens == 0) {
        const int32_t completion = usage_.completion_tokens;
        usage_ = usage;
        usage_.completion_tokens = completion;
      }
      usage_.completion_tokens += usage.completion_tokens;
    } else if (!failure_.has_value()) {
      failure_ = status;
      for (Choice& other : choices_) {
        if (!other.finished && other.link != nullptr) cancel.push_back(other.link);
      }
    }
    WakeLocked(/*now=*/finished_ == static_cast<int32_t>(choices_.size()));
  }
  // Outside the lock: a cancelled request's sink finishes on this thread at once.
  for (const std::shared_ptr<CancelLink>& link : cancel) link->Cancel();
}

void HttpApi::Exchange::WakeLocked(bool now) {
  if (!suspended_ || closed_) return;
  // A request that is not streamed has nothing to send before its end (or a failure).
  if (!streaming_ && !now && !failure_.has_value()) return;
  if (!now && stream_started_) {
    GenerationHost& host = *api_->service_->generation_host();
    if (host.clock().Now() < next_write_) {
      if (!wake_scheduled_) {
        wake_scheduled_ = true;
        host.writer().PostAt(next_write_, [self = shared_from_this()] {
          std::lock_guard<std::mutex> lock(self->mu_);
          self->wake_scheduled_ = false;
          self->WakeLocked(/*now=*/true);
        });
      }
      return;
    }
  }
  suspended_ = false;
  MHD_resume_connection(connection_);
}

bool HttpApi::Exchange::Close() {
  std::vector<std::shared_ptr<CancelLink>> cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    for (Choice& c : choices_) {
      if (!c.finished && c.link != nullptr) cancel.push_back(c.link);
    }
  }
  for (const std::shared_ptr<CancelLink>& link : cancel) link->Cancel();
  return !cancel.empty();
}

namespace {

MHD_Result Queue(Metrics& metrics, MHD_Connection* connection, int status, const std::string& body,
                 const char* content_type, bool retry_after, absl::Duration retry_hint,
                 const char* allow = nullptr) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;  // out of memory: MHD closes the connection
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (allow != nullptr) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
  if (retry_after) {
    const int64_t seconds =
        std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(retry_hint, absl::Seconds(1))));
    MHD_add_response_header(response, MHD_HTTP_HEADER_RETRY_AFTER, std::to_string(seconds).c_str());
  }
  const MHD_Result result = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  metrics.RecordHttpResponse(status);
  return result;
}

}  // namespace

// The callbacks libmicrohttpd calls, with the HttpApi as their closure.
class HttpApiCallbacks {
 public:
  static MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url,
                           const char* method, const char* version, const char* upload_data,
                           size_t* upload_data_size, void** request_state);
  static void Completed(void* cls, MHD_Connection* connection, void** request_state,
                        MHD_RequestTerminationCode toe);
  static void Connection(void* cls, MHD_Connection* connection, void** socket_context,
                         MHD_ConnectionNotificationCode toe);

 private:
  static MHD_Result Error(HttpApi& api, HttpApi::Exchange& ex, MHD_Connection* connection,
                          const HttpError& error, std::string rpc_code,
                          const char* allow = nullptr);
  static MHD_Result StatusError(HttpApi& api, HttpApi::Exchange& ex, MHD_Connection* connection,
                                const absl::Status& status);
  static MHD_Result Json200(HttpApi& api, HttpApi::Exchange& ex, MHD_Connection* connection,
                            const std::string& body);
  static MHD_Result Models(HttpApi& api, HttpApi::Exchange& ex, MHD_Connection* connection);
  static MHD_Result TooLarge(HttpApi& api, HttpApi::Exchange& ex, MHD_Connection* connection);
  static MHD_Result Generate(HttpApi& api, const std::shared_ptr<HttpApi::Exchange>& ex,
                             MHD_Connection* connection);
};

MHD_Result HttpApiCallbacks::Error(HttpApi& api, HttpApi::Exchange& ex, MHD_Connection* connection,
                                   const HttpError& error, std::string rpc_code,
                                   const char* allow) {
  ex.set_rpc_code(std::move(rpc_code));
  ex.refused() = true;
  return Queue(*api.metrics_, connection, error.status, error.body, "application/json",
               error.retry_after, api.service_->options().retry_after, allow);
}

MHD_Result HttpApiCallbacks::StatusError(HttpApi& api, HttpApi::Exchange& ex,
                                         MHD_Connection* connection, const absl::Status& status) {
  const ApiKind kind =
      ex.route().route == Route::kCompletions ? ApiKind::kCompletions : ApiKind::kChatCompletions;
  return Error(api, ex, connection, ToHttpError(status, kind), CodeName(status.code()));
}

MHD_Result HttpApiCallbacks::Json200(HttpApi& api, HttpApi::Exchange& ex,
                                     MHD_Connection* connection, const std::string& body) {
  ex.set_rpc_code(CodeName(absl::StatusCode::kOk));
  return Queue(*api.metrics_, connection, MHD_HTTP_OK, body, "application/json", false,
               absl::ZeroDuration());
}

MHD_Result HttpApiCallbacks::TooLarge(HttpApi& api, HttpApi::Exchange& ex,
                                      MHD_Connection* connection) {
  return Error(
      api, ex, connection,
      MakeHttpError(413,
                    absl::StrCat("the request body is larger than ", api.options_.max_body_bytes,
                                 " bytes (--max-message-bytes)"),
                    "request_too_large"),
      CodeName(absl::StatusCode::kResourceExhausted));
}

MHD_Result HttpApiCallbacks::Models(HttpApi& api, HttpApi::Exchange& ex,
                                    MHD_Connection* connection) {
  absl::StatusOr<InferenceService::Caller> caller =
      api.service_->Admit(Header(connection, MHD_HTTP_HEADER_AUTHORIZATION));
  if (!caller.ok()) return StatusError(api, ex, connection, caller.status());
  const std::string& name = api.options_.served_model_name;
  if (ex.route().route == Route::kModel) {
    if (ex.route().model_id != name) {
      return Error(api, ex, connection,
                   MakeHttpError(404,
                                 absl::StrCat("the model '", ex.route().model_id.substr(0, 256),
                                              "' does not exist; this server serves '", name, "'"),
                                 "model_not_found", "model"),
                   CodeName(absl::StatusCode::kNotFound));
    }
    return Json200(api, ex, connection, ModelBody(name, api.started_unix_));
  }
  return Json200(api, ex, connection, ModelListBody(name, api.started_unix_));
}

MHD_Result HttpApiCallbacks::Generate(HttpApi& api, const std::shared_ptr<HttpApi::Exchange>& ex,
                                      MHD_Connection* connection) {
  const ApiKind kind =
      ex->route().route == Route::kCompletions ? ApiKind::kCompletions : ApiKind::kChatCompletions;
  absl::StatusOr<InferenceService::Caller> caller =
      api.service_->Admit(Header(connection, MHD_HTTP_HEADER_AUTHORIZATION));
  if (!caller.ok()) return StatusError(api, *ex, connection, caller.status());
  absl::StatusOr<OpenAiRequest> request = ParseOpenAiRequest(kind, ex->body(), api.options_.limits);
  std::string().swap(ex->body());
  if (!request.ok()) return StatusError(api, *ex, connection, request.status());
  const std::string& name = api.options_.served_model_name;
  if (request->model != name) {
    return Error(api, *ex, connection,
                 MakeHttpError(404,
                               absl::StrCat("the model '", request->model.substr(0, 256),
                                            "' does not exist; this server serves '", name, "'"),
                               "model_not_found", "model"),
                 CodeName(absl::StatusCode::kNotFound));
  }
  if (std::optional<std::string_view> session = Header(connection, kSessionHeader)) {
    if (request->generate.session_id().empty()) {
      request->generate.set_session_id(std::string(*session));
    } else if (request->generate.session_id() != *session) {
      return StatusError(api, *ex, connection,
                         engine::FieldError("session_id", absl::StrCat("differs from the ",
                                                                       kSessionHeader, " header")));
    }
  }
  if (request->n > 1 && !request->generate.session_id().empty()) {
    // Every choice would be a turn of the one session, which takes one turn at a time.
    return StatusError(api, *ex, connection,
                       engine::FieldError("n", "must be 1 for a session turn (session_id)"));
  }
  const ServingCore& core = *caller->core;
  ResponseContext& ctx = ex->context();
  ctx.kind = kind;
  absl::StatusOr<std::string> id = common::SecureRandomHex(12);
  if (!id.ok()) return StatusError(api, *ex, connection, id.status());
  ctx.id = absl::StrCat(kind == ApiKind::kChatCompletions ? "chatcmpl-" : "cmpl-", *id);
  ctx.created = absl::ToUnixSeconds(absl::Now());
  ctx.model = name;
  ctx.system_fingerprint =
      absl::StrCat("fp_", absl::Hex(core.model->fingerprint(), absl::kZeroPad16));
  ctx.tokenizer = core.tokenizer;
  ctx.logprobs = request->logprobs;
  ctx.include_usage = request->stream && request->include_usage;
  std::string echo;
  if (request->echo) {
    const v1::GenerateRequest& g = request->generate;
    echo = g.has_tokens() ? core.tokenizer->Decode(std::span<const int32_t>(
                                g.tokens().ids().data(), g.tokens().ids().size()))
                          : g.text();
  }
  ex->Submit(*caller, *request, echo, ex);
  return ex->Continue();
}

MHD_Result HttpApi::Exchange::Continue() {
  Metrics& metrics = *api_->metrics_;
  std::unique_lock<std::mutex> lock(mu_);
  if (failure_.has_value() && !stream_started_) {
    const absl::Status failure = *failure_;
    lock.unlock();
    const HttpError error = ToHttpError(failure, ctx_.kind);
    rpc_code_ = CodeName(failure.code());
    return Queue(metrics, connection_, error.status, error.body, "application/json",
                 error.retry_after, api_->service_->options().retry_after);
  }
  const int32_t n = static_cast<int32_t>(choices_.size());
  if (!streaming_ && finished_ == n) {
    std::vector<ChoiceOutput> outputs;
    for (Choice& c : choices_) outputs.push_back(std::move(c.pending));
    const engine::Usage usage = usage_;
    lock.unlock();
    rpc_code_ = CodeName(absl::StatusCode::kOk);
    return Queue(metrics, connection_, MHD_HTTP_OK, CompletionBody(ctx_, outputs, usage),
                 "application/json", false, absl::ZeroDuration());
  }
  if (streaming_ && !stream_started_) {
    bool output = finished_ > 0;
    for (const Choice& c : choices_) output = output || !c.pending.text.empty();
    if (output) {
      stream_started_ = true;
      lock.unlock();
      return StartStream();
    }
  }
  // Nothing to answer yet: the next sink event resumes the connection.
  suspended_ = true;
  MHD_suspend_connection(connection_);
  WatchLocked();
  return MHD_YES;
}

void HttpApi::Exchange::WatchLocked() {
  if (watch_scheduled_) return;
  watch_scheduled_ = true;
  GenerationHost& host = *api_->service_->generation_host();
  host.writer().PostAt(host.clock().Now() + kDisconnectCheck, [self = shared_from_this()] {
    std::vector<std::shared_ptr<CancelLink>> cancel;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->watch_scheduled_ = false;
      // Only while suspended: then libmicrohttpd neither reads the socket nor closes it.
      if (!self->suspended_ || self->closed_) return;
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(self->connection_, MHD_CONNECTION_INFO_CONNECTION_FD);
      char byte;
      const ssize_t n =
          info == nullptr ? -1 : recv(info->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      const bool gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
      if (!gone) {
        self->WatchLocked();
        return;
      }
      // The client went away: its generations end now; the answer they give fails to
      // send and the connection closes.
      for (Choice& c : self->choices_) {
        if (!c.finished && c.link != nullptr) cancel.push_back(c.link);
      }
    }
    for (const std::shared_ptr<CancelLink>& link : cancel) link->Cancel();
  });
}

MHD_Result HttpApi::Exchange::StartStream() {
  MHD_Response* response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, kStreamBlockBytes,
                                                             &Exchange::ReadStream, this, nullptr);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
  MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  rpc_code_ = CodeName(absl::StatusCode::kOk);
  const MHD_Result result = MHD_queue_response(connection_, MHD_HTTP_OK, response);
  MHD_destroy_response(response);
  api_->metrics_->RecordHttpResponse(MHD_HTTP_OK);
  return result;
}

void HttpApi::Exchange::FormatLocked() {
  if (tail_sent_) return;
  if (failure_.has_value()) {
    // The stream ends with the error; what the other choices still had is dropped.
    stream_ += StreamErrorEvent(ToHttpError(*failure_, ctx_.kind));
    rpc_code_ = CodeName(failure_->code());
    tail_sent_ = true;
    return;
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    if (c.final_sent) continue;
    if (c.pending.text.empty() && c.pending.tokens.empty() && !c.finished) continue;
    if (!c.finished) c.pending.finish.reset();
    stream_ += StreamChunk(ctx_, static_cast<int32_t>(i), c.pending, !c.first_sent);
    c.first_sent = true;
    c.final_sent = c.finished;
    const int32_t last =
        c.pending.tokens.empty() ? c.pending.prev_token : c.pending.tokens.back().token;
    c.pending = ChoiceOutput();
    c.pending.prev_token = last;
  }
  if (finished_ < static_cast<int32_t>(choices_.size())) return;
  if (ctx_.include_usage) stream_ += StreamUsageChunk(ctx_, usage_);
  stream_ += kStreamDone;
  tail_sent_ = true;
}

ssize_t HttpApi::Exchange::ReadStream(void* cls, uint64_t /*pos*/, char* buf, size_t max) {
  auto* ex = static_cast<Exchange*>(cls);
  std::lock_guard<std::mutex> lock(ex->mu_);
  ex->FormatLocked();
  if (!ex->stream_.empty()) {
    ex->next_write_ = ex->api_->service_->generation_host()->clock().Now() +
                      ex->api_->service_->options().stream_flush_interval;
    const size_t n = std::min(max, ex->stream_.size());
    std::memcpy(buf, ex->stream_.data(), n);
    ex->stream_.erase(0, n);
    return static_cast<ssize_t>(n);
  }
  if (ex->tail_sent_) return MHD_CONTENT_READER_END_OF_STREAM;
  ex->suspended_ = true;
  MHD_suspend_connection(ex->connection_);
  return 0;
}

MHD_Result HttpApiCallbacks::Handle(void* cls, MHD_Connection* connection, const char* url,
                                    const char* method, const char* /*version*/,
                                    const char* upload_data, size_t* upload_data_size,
                                    void** request_state) {
  HttpApi& api = *static_cast<HttpApi*>(cls);
  auto* holder = static_cast<std::shared_ptr<HttpApi::Exchange>*>(*request_state);
  if (holder == nullptr) {
    // The first call: headers only. What can be refused without the body is refused now
    // (unknown path, method, credentials, a body announced too large: libmicrohttpd then
    // drops the body and closes the connection), so that no body is buffered for nothing.
    // The rest is answered on the last call, and its connection stays open.
    holder = new std::shared_ptr<HttpApi::Exchange>(
        std::make_shared<HttpApi::Exchange>(&api, connection, MatchRoute(url)));
    *request_state = holder;
    api.deadlines_->HeadersArrived(connection);
    HttpApi::Exchange& ex = **holder;
    const RouteMatch& route = ex.route();
    if (route.route == Route::kUnknown) {
      return Error(
          api, ex, connection,
          MakeHttpError(404, absl::StrCat("no such path: ", std::string(url).substr(0, 256)),
                        "not_found"),
          "");
    }
    // HEAD as GET (libmicrohttpd sends no body).
    const bool head = std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0 &&
                      std::strcmp(route.allow, MHD_HTTP_METHOD_GET) == 0;
    if (std::strcmp(method, route.allow) != 0 && !head) {
      const char* allow =
          std::strcmp(route.allow, MHD_HTTP_METHOD_GET) == 0 ? "GET, HEAD" : route.allow;
      return Error(api, ex, connection,
                   MakeHttpError(405, absl::StrCat(allow, " only"), "method_not_allowed"), "",
                   allow);
    }
    if (route.route != Route::kChatCompletions && route.route != Route::kCompletions) {
      return MHD_YES;  // GET: answered on the last call; a body is not kept
    }
    absl::StatusOr<InferenceService::Caller> caller =
        api.service_->Admit(Header(connection, MHD_HTTP_HEADER_AUTHORIZATION));
    if (!caller.ok()) return StatusError(api, ex, connection, caller.status());
    if (std::optional<std::string_view> length =
            Header(connection, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
      uint64_t bytes = 0;
      if (absl::SimpleAtoi(absl::string_view(length->data(), length->size()), &bytes)) {
        if (bytes > static_cast<uint64_t>(api.options_.max_body_bytes)) {
          ex.too_large() = true;
          return TooLarge(api, ex, connection);
        }
        ex.body().reserve(bytes);
      }
    }
    return MHD_YES;
  }
  const std::shared_ptr<HttpApi::Exchange>& ex = *holder;
  if (ex->refused()) {
    *upload_data_size = 0;  // refused at the first call: the rest is dropped
    return MHD_YES;
  }
  if (ex->started()) return ex->Continue();  // resumed
  const Route route = ex->route().route;
  const bool generation = route == Route::kChatCompletions || route == Route::kCompletions;
  if (*upload_data_size > 0) {
    if (generation && !ex->too_large()) {
      if (static_cast<int64_t>(ex->body().size() + *upload_data_size) >
          api.options_.max_body_bytes) {
        ex->too_large() = true;
        std::string().swap(ex->body());
      } else {
        ex->body().append(upload_data, *upload_data_size);
      }
    }
    *upload_data_size = 0;
    return MHD_YES;
  }
  // The last call: the request is whole.
  api.deadlines_->BodyArrived(connection);
  if (ex->too_large()) return TooLarge(api, *ex, connection);
  switch (route) {
    case Route::kHealth: {
      const bool ready = api.service_->ready();
      return Queue(*api.metrics_, connection, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
                   ready ? R"({"status":"ok"})" : R"({"status":"unavailable"})", "application/json",
                   !ready, api.service_->options().retry_after);
    }
    case Route::kModels:
    case Route::kModel:
      return Models(api, *ex, connection);
    default:
      return Generate(api, ex, connection);
  }
}

void HttpApiCallbacks::Completed(void* cls, MHD_Connection* connection, void** request_state,
                                 MHD_RequestTerminationCode toe) {
  HttpApi& api = *static_cast<HttpApi*>(cls);
  api.deadlines_->RequestEnded(connection);
  auto* holder = static_cast<std::shared_ptr<HttpApi::Exchange>*>(*request_state);
  if (holder == nullptr) return;
  *request_state = nullptr;
  const std::shared_ptr<HttpApi::Exchange> ex = std::move(*holder);
  delete holder;
  const bool cut_short = ex->Close();
  if (const char* method = ex->rpc_method(); method != nullptr) {
    // The client went away before its answer was whole: cancelled, as gRPC counts it.
    const bool aborted = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
    std::string code = ex->rpc_code();
    if (code.empty() || (aborted && (cut_short || ex->streaming()))) {
      code = CodeName(absl::StatusCode::kCancelled);
    }
    api.metrics_->RecordRpc(kHttp, method, code);
  }
  if (ex->started()) api.generating_.fetch_sub(1);
}

void HttpApiCallbacks::Connection(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                                  MHD_ConnectionNotificationCode toe) {
  HttpApi& api = *static_cast<HttpApi*>(cls);
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info != nullptr) api.deadlines_->Opened(connection, info->connect_fd);
    api.metrics_->AddHttpConnections(1);
  } else {
    api.deadlines_->Closed(connection);
    api.metrics_->AddHttpConnections(-1);
  }
}

absl::Status ValidateHttpApiOptions(const HttpApiOptions& options) {
  if (absl::Status s =
          server::ValidateHttpDaemonOptions(options.daemon, "http", "http-idle-timeout");
      !s.ok()) {
    return s;
  }
  if (options.max_body_bytes < 1024) {
    return absl::InvalidArgumentError("max-message-bytes must be >= 1024");
  }
  if (options.served_model_name.empty() || options.served_model_name.size() > 256) {
    return absl::InvalidArgumentError("served-model-name must be 1 to 256 bytes");
  }
  if (options.limits.max_n < 1 || options.limits.max_n > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("max-n must be in [1, 128], got ", options.limits.max_n));
  }
  return absl::OkStatus();
}

HttpApi::HttpApi(const HttpApiOptions& options, InferenceService* service, Metrics* metrics)
    : options_(options),
      service_(service),
      metrics_(metrics),
      started_unix_(absl::ToUnixSeconds(absl::Now())) {}

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Start(const HttpApiOptions& options,
                                                        InferenceService* service,
                                                        Metrics* metrics) {
  if (absl::Status s = ValidateHttpApiOptions(options); !s.ok()) return s;
  std::unique_ptr<HttpApi> api(new HttpApi(options, service, metrics));
  api->deadlines_ = std::make_unique<server::HttpRequestDeadlines>(options.daemon.idle_timeout);
  server::HttpDaemonOptions daemon = options.daemon;
  daemon.suspend_resume = true;
  daemon.on_completed = &HttpApiCallbacks::Completed;
  daemon.on_connection = &HttpApiCallbacks::Connection;
  absl::StatusOr<std::unique_ptr<server::HttpDaemon>> started =
      server::HttpDaemon::Start(daemon, &HttpApiCallbacks::Handle, api.get());
  if (!started.ok()) return started.status();
  api->daemon_ = *std::move(started);
  return api;
}

void HttpApi::WaitAnswered(absl::Time deadline) {
  while (generating_.load() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
}

HttpApi::~HttpApi() {
  daemon_.reset();  // before the deadlines its callbacks report to
}

}  // namespace kvserve::service
