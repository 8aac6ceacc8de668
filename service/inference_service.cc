#include "service/inference_service.h"

#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "service/grpc_status.h"

namespace kvserve::service {
namespace {

constexpr char kGenerate[] = "Generate";
constexpr char kGenerateStream[] = "GenerateStream";

absl::Time CallDeadline(const grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

// Links a call's cancellation (client cancel, deadline, write failure) to its engine
// request, whichever of "request submitted" and "call cancelled" happens first.
// Thread-safe.
class CancelLink {
 public:
  explicit CancelLink(engine::Engine* engine) : engine_(engine) {}

  void SetRequestId(engine::RequestId id) {
    bool cancel = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id_ = id;
      cancel = cancelled_;
    }
    if (cancel) engine_->Cancel(id);
  }

  void Cancel() {
    std::optional<engine::RequestId> id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      id = id_;
    }
    if (id.has_value()) engine_->Cancel(*id);
  }

 private:
  engine::Engine* const engine_;
  std::mutex mu_;
  std::optional<engine::RequestId> id_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// A unary reactor that forwards cancellation to the engine.
class UnaryGenerateReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit UnaryGenerateReactor(std::shared_ptr<CancelLink> link) : link_(std::move(link)) {}
  void OnCancel() override { link_->Cancel(); }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<CancelLink> link_;
};

// Collects a unary generation into the response. Engine step thread only.
class UnarySink final : public engine::RequestSink {
 public:
  UnarySink(InferenceService* service, grpc::CallbackServerContext* context,
            grpc::ServerUnaryReactor* reactor, v1::GenerateResponse* response, bool logprobs)
      : service_(service),
        context_(context),
        reactor_(reactor),
        response_(response),
        logprobs_(logprobs) {}

  void OnToken(const engine::TokenEvent& event) override {
    const absl::Time now = absl::Now();
    if (last_token_time_.has_value())
      service_->metrics()->RecordInterTokenLatency(now - *last_token_time_);
    last_token_time_ = now;
    response_->mutable_text()->append(event.text);
    AppendToken(event, logprobs_, response_->mutable_token_ids(), response_->mutable_logprobs());
  }

  void OnFinish(const absl::Status& status, engine::FinishReason reason,
                const engine::Usage& usage) override {
    service_->metrics()->RecordGeneration(reason, usage);
    const absl::Status final_status = service_->GenerationStatus(reason, status);
    if (final_status.ok()) {
      response_->set_finish_reason(ToProtoFinishReason(reason));
      ToProtoUsage(usage, response_->mutable_usage());
    }
    InferenceService* service = service_;
    // After Finish the reactor, context and response may be gone.
    reactor_->Finish(service->FinalStatus(context_, kGenerate, final_status));
    service->GenerationEnded();
  }

 private:
  InferenceService* const service_;
  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  v1::GenerateResponse* const response_;
  const bool logprobs_;
  std::optional<absl::Time> last_token_time_;
};

// Streams a generation with exactly one write in flight: tokens that arrive while a
// write (or a kick) is pending, or before the flush interval since the last write has
// passed, accumulate into the next message. The last message
// carries the finish reason and usage. Threading: PushToken/Complete run on the
// engine's step thread; the first token's write starts there, after it they only
// append under mu_ and, when nothing is pending, schedule one Kick on the service's
// writer thread, which starts the write or the finish. OnWriteDone (gRPC thread)
// starts the next one. State is guarded by mu_, and gRPC is called after unlocking
// (a reaction may run, and OnDone delete this, at once). Lifetime: Finish is only called
// while no kick is scheduled, so OnDone (which deletes this) cannot run before a
// scheduled kick has run.
class StreamGenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
 public:
  StreamGenerateReactor(InferenceService* service, grpc::CallbackServerContext* context,
                        std::shared_ptr<CancelLink> link)
      : service_(service), context_(context), link_(std::move(link)) {}

  // Ends the call before anything was submitted to the engine.
  void Reject(const absl::Status& status) {
    Finish(service_->FinalStatus(context_, kGenerateStream, status));
  }

  void PushToken(const engine::TokenEvent& event, bool logprobs) {
    std::unique_lock<std::mutex> lock(mu_);
    pending_.mutable_text()->append(event.text);
    AppendToken(event, logprobs, pending_.mutable_token_ids(), pending_.mutable_logprobs());
    has_pending_ = true;
    if (!first_write_started_) {
      // The first token goes out at once (time to first token); it is one write per
      // call, and later ones are started by the writer thread or OnWriteDone.
      first_write_started_ = true;
      Advance(std::move(lock));
      return;
    }
    ScheduleKick(std::move(lock));
  }

  // The engine finished the request (called once; the sink calls nothing after it).
  void Complete(const absl::Status& status, engine::FinishReason reason,
                const engine::Usage& usage) {
    const absl::Status final_status = service_->GenerationStatus(reason, status);
    std::unique_lock<std::mutex> lock(mu_);
    if (final_status.ok()) {
      pending_.set_finish_reason(ToProtoFinishReason(reason));
      ToProtoUsage(usage, pending_.mutable_usage());
    }
    final_status_ = final_status;
    completed_ = true;
    ScheduleKick(std::move(lock));
  }

  // Writer thread: starts the write or finish scheduled by ScheduleKick or delayed by
  // Advance.
  void Kick() {
    std::unique_lock<std::mutex> lock(mu_);
    kick_scheduled_ = false;
    Advance(std::move(lock));  // `this` may be deleted from here on
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) write_failed_ = true;
    if (!ok && !completed_) {
      lock.unlock();
      link_->Cancel();  // the client is gone: stop generating; Complete follows
      return;
    }
    Advance(std::move(lock));
  }

  void OnCancel() override { link_->Cancel(); }
  void OnDone() override { delete this; }

 private:
  // Engine thread: hands the next write to the writer thread unless a write or a kick
  // is already pending (OnWriteDone/Kick then pick up what was appended). Releases
  // `lock`; after it, only the kick may end the call.
  void ScheduleKick(std::unique_lock<std::mutex> lock) {
    if (finish_called_ || writing_ || kick_scheduled_) return;
    kick_scheduled_ = true;
    lock.unlock();
    service_->RunOnWriter([this] { Kick(); });
  }

  // Starts the next write or the finish, if any is due. Releases `lock`.
  void Advance(std::unique_lock<std::mutex> lock) {
    if (finish_called_ || writing_ || kick_scheduled_) return;
    if (completed_) {
      finish_called_ = true;
      const bool write_last = final_status_.ok() && !write_failed_;
      if (write_last) in_flight_.Swap(&pending_);
      const absl::Status final_status = final_status_;
      lock.unlock();
      InferenceService* service = service_;
      const grpc::Status status = service->FinalStatus(context_, kGenerateStream, final_status);
      // After these calls `this` may be deleted at any moment.
      if (write_last) {
        StartWriteAndFinish(&in_flight_, grpc::WriteOptions(), status);
      } else {
        Finish(status);
      }
      service->GenerationEnded();
      return;
    }
    if (!has_pending_ || write_failed_) return;
    const absl::Time now = absl::Now();
    if (now < next_write_) {
      // Too soon after the last write (Options::stream_flush_interval): come back when it
      // is due; tokens that arrive meanwhile join this message.
      kick_scheduled_ = true;
      const absl::Time when = next_write_;
      lock.unlock();
      service_->RunOnWriterAt(when, [this] { Kick(); });
      return;
    }
    next_write_ = now + service_->options().stream_flush_interval;
    in_flight_.Swap(&pending_);
    pending_.Clear();
    has_pending_ = false;
    writing_ = true;
    lock.unlock();
    StartWrite(&in_flight_);
  }

  InferenceService* const service_;
  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<CancelLink> link_;

  std::mutex mu_;
  v1::GenerateStreamResponse pending_ ABSL_GUARDED_BY(mu_);
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  // The message being written; touched only while writing_ (or after finish_called_).
  v1::GenerateStreamResponse in_flight_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // The earliest time the next (not last) write may start.
  absl::Time next_write_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool kick_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  bool first_write_started_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool completed_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status final_status_ ABSL_GUARDED_BY(mu_);
};

// Forwards engine output to a StreamGenerateReactor. Engine step thread only.
class StreamSink final : public engine::RequestSink {
 public:
  StreamSink(InferenceService* service, StreamGenerateReactor* reactor, bool logprobs)
      : service_(service), reactor_(reactor), logprobs_(logprobs) {}

  void OnToken(const engine::TokenEvent& event) override {
    const absl::Time now = absl::Now();
    if (last_token_time_.has_value())
      service_->metrics()->RecordInterTokenLatency(now - *last_token_time_);
    last_token_time_ = now;
    reactor_->PushToken(event, logprobs_);
  }

  void OnFinish(const absl::Status& status, engine::FinishReason reason,
                const engine::Usage& usage) override {
    service_->metrics()->RecordGeneration(reason, usage);
    reactor_->Complete(status, reason, usage);
  }

 private:
  InferenceService* const service_;
  StreamGenerateReactor* const reactor_;
  const bool logprobs_;
  std::optional<absl::Time> last_token_time_;
};

}  // namespace

InferenceService::InferenceService(Options options, Metrics* metrics)
    : options_(std::move(options)), metrics_(metrics), writer_([this] { WriterLoop(); }) {}

InferenceService::~InferenceService() {
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    writer_stop_ = true;
  }
  writer_cv_.notify_one();
  writer_.join();
}

void InferenceService::RunOnWriter(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    writer_tasks_.push_back(std::move(task));
  }
  writer_cv_.notify_one();
}

void InferenceService::RunOnWriterAt(absl::Time when, std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    writer_timed_.emplace(when, std::move(task));
  }
  writer_cv_.notify_one();
}

void InferenceService::WriterLoop() {
  std::unique_lock<std::mutex> lock(writer_mu_);
  while (true) {
    // Move the timed tasks that are due (all of them when stopping) behind the others.
    const absl::Time now = absl::Now();
    while (!writer_timed_.empty() && (writer_stop_ || writer_timed_.begin()->first <= now)) {
      writer_tasks_.push_back(std::move(writer_timed_.begin()->second));
      writer_timed_.erase(writer_timed_.begin());
    }
    if (writer_tasks_.empty()) {
      if (writer_stop_) return;  // every task has run
      if (writer_timed_.empty()) {
        writer_cv_.wait(lock);
      } else {
        writer_cv_.wait_until(lock, absl::ToChronoTime(writer_timed_.begin()->first));
      }
      continue;
    }
    std::function<void()> task = std::move(writer_tasks_.front());
    writer_tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

void InferenceService::Attach(const ServingCore* core) { core_.store(core); }

void InferenceService::StartDraining() { draining_.store(true); }

bool InferenceService::WaitIdle(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait_until(lock, absl::ToChronoTime(deadline), [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return inflight_ == 0 || wait_idle_ended_;
  });
  return inflight_ == 0;
}

void InferenceService::EndWaitIdle() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    wait_idle_ended_ = true;
  }
  idle_cv_.notify_all();
}

int InferenceService::inflight_generations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inflight_;
}

void InferenceService::GenerationStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  ++inflight_;
}

void InferenceService::GenerationEnded() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--inflight_ == 0) idle_cv_.notify_all();
}

absl::StatusOr<const ServingCore*> InferenceService::Admit() const {
  if (draining_.load()) return absl::UnavailableError("server is draining; retry elsewhere");
  const ServingCore* core = core_.load();
  if (core == nullptr) return absl::UnavailableError("model is loading; retry later");
  return core;
}

absl::StatusOr<engine::Request> InferenceService::PrepareGeneration(
    const ServingCore& core, grpc::CallbackServerContext* context,
    const v1::GenerateRequest& request) const {
  const absl::Time deadline = CallDeadline(context);
  if (deadline <= absl::Now()) {
    return absl::DeadlineExceededError("deadline expired before the request was queued");
  }
  int32_t history_tokens = 0;
  if (!request.session_id().empty() &&
      static_cast<int64_t>(request.session_id().size()) <= options_.limits.max_session_id_bytes) {
    absl::StatusOr<engine::SessionInfo> session = core.engine->GetSession(request.session_id());
    if (!session.ok()) return session.status();
    history_tokens = session->history_tokens;
  }
  RequestLimits limits = options_.limits;
  limits.vocab_size = core.model->config().vocab_size;
  limits.context_length = core.model->config().context_length;
  return ToEngineRequest(request, limits, *core.tokenizer, history_tokens, deadline);
}

absl::Status InferenceService::GenerationStatus(engine::FinishReason reason,
                                                const absl::Status& engine_status) const {
  if (reason == engine::FinishReason::kCancelled && draining_.load()) {
    return absl::UnavailableError("server shut down before the request finished; retry");
  }
  return FinishStatus(reason, engine_status);
}

grpc::Status InferenceService::FinalStatus(grpc::CallbackServerContext* context, const char* method,
                                           const absl::Status& status) const {
  if (WantsRetryHint(status)) AddRetryHint(context, options_.retry_after);
  grpc::Status grpc_status = ToGrpcStatus(status);
  metrics_->RecordRpc(method, GrpcCodeName(grpc_status.error_code()));
  return grpc_status;
}

void InferenceService::FinishUnary(grpc::ServerUnaryReactor* reactor,
                                   grpc::CallbackServerContext* context, const char* method,
                                   const absl::Status& status) const {
  reactor->Finish(FinalStatus(context, method, status));
}

grpc::ServerUnaryReactor* InferenceService::Generate(grpc::CallbackServerContext* context,
                                                     const v1::GenerateRequest* request,
                                                     v1::GenerateResponse* response) {
  absl::StatusOr<const ServingCore*> core = Admit();
  if (!core.ok()) {
    auto* reactor = context->DefaultReactor();
    FinishUnary(reactor, context, kGenerate, core.status());
    return reactor;
  }
  auto link = std::make_shared<CancelLink>((*core)->engine);
  auto* reactor = new UnaryGenerateReactor(link);
  absl::StatusOr<engine::Request> engine_request = PrepareGeneration(**core, context, *request);
  if (!engine_request.ok()) {
    FinishUnary(reactor, context, kGenerate, engine_request.status());
    return reactor;
  }
  GenerationStarted();
  auto sink =
      std::make_shared<UnarySink>(this, context, reactor, response, request->top_logprobs() > 0);
  absl::StatusOr<engine::RequestId> id =
      (*core)->engine->Submit(*std::move(engine_request), std::move(sink));
  if (!id.ok()) {
    FinishUnary(reactor, context, kGenerate, id.status());
    GenerationEnded();
    return reactor;
  }
  link->SetRequestId(*id);
  return reactor;
}

grpc::ServerWriteReactor<v1::GenerateStreamResponse>* InferenceService::GenerateStream(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  absl::StatusOr<const ServingCore*> core = Admit();
  auto link = std::make_shared<CancelLink>(core.ok() ? (*core)->engine : nullptr);
  auto* reactor = new StreamGenerateReactor(this, context, link);
  if (!core.ok()) {
    reactor->Reject(core.status());
    return reactor;
  }
  absl::StatusOr<engine::Request> engine_request = PrepareGeneration(**core, context, *request);
  if (!engine_request.ok()) {
    reactor->Reject(engine_request.status());
    return reactor;
  }
  GenerationStarted();
  auto sink = std::make_shared<StreamSink>(this, reactor, request->top_logprobs() > 0);
  absl::StatusOr<engine::RequestId> id =
      (*core)->engine->Submit(*std::move(engine_request), std::move(sink));
  if (!id.ok()) {
    reactor->Reject(id.status());
    GenerationEnded();
    return reactor;
  }
  link->SetRequestId(*id);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<const ServingCore*> core = Admit();
  absl::Status status = core.status();
  if (status.ok() &&
      static_cast<int64_t>(request->text().size()) > options_.limits.max_prompt_bytes) {
    status = absl::InvalidArgumentError(absl::StrCat("text is ", request->text().size(),
                                                     " bytes, at most ",
                                                     options_.limits.max_prompt_bytes, " allowed"));
  }
  if (status.ok()) {
    for (int32_t id : (*core)->tokenizer->Encode(request->text(), request->add_bos())) {
      response->add_token_ids(id);
    }
  }
  FinishUnary(reactor, context, "Tokenize", status);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Detokenize(grpc::CallbackServerContext* context,
                                                       const v1::DetokenizeRequest* request,
                                                       v1::DetokenizeResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<const ServingCore*> core = Admit();
  absl::Status status = core.status();
  if (status.ok()) {
    absl::StatusOr<std::string> text = (*core)->tokenizer->DecodeChecked(
        std::span<const int32_t>(request->token_ids().data(), request->token_ids().size()));
    if (text.ok()) {
      response->set_text(*std::move(text));
    } else {
      status = absl::InvalidArgumentError(
          absl::StrCat("token_ids: ", std::string(text.status().message())));
    }
  }
  FinishUnary(reactor, context, "Detokenize", status);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::GetModelInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetModelInfoRequest* request,
                                                         v1::ModelInfo* response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<const ServingCore*> core = Admit();
  if (core.ok()) {
    const model::Model& model = *(*core)->model;
    const model::ModelConfig& config = model.config();
    response->set_architecture(config.architecture);
    response->set_vocab_size(config.vocab_size);
    response->set_context_length(config.context_length);
    response->set_n_layers(config.n_layers);
    response->set_dim(config.dim);
    response->set_n_heads(config.n_heads);
    response->set_n_kv_heads(config.n_kv_heads);
    response->set_bos_id(model.vocab().bos_id);
    response->set_eos_id(model.vocab().eos_id);
    response->set_fingerprint(absl::StrCat(absl::Hex(model.fingerprint(), absl::kZeroPad16)));
    response->set_backend((*core)->backend_name);
    response->set_max_tokens_limit(options_.limits.max_tokens_limit);
    response->set_default_max_tokens(options_.limits.default_max_tokens);
  }
  FinishUnary(reactor, context, "GetModelInfo", core.status());
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::OpenSession(grpc::CallbackServerContext* context,
                                                        const v1::OpenSessionRequest* request,
                                                        v1::Session* response) {
  auto* reactor = context->DefaultReactor();
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<const ServingCore*> core = Admit();
    if (!core.ok()) return core.status();
    absl::StatusOr<absl::Duration> ttl = SessionTtl(request->ttl(), "ttl");
    if (!ttl.ok()) return ttl.status();
    absl::StatusOr<engine::SessionInfo> info = (*core)->engine->OpenSession(*ttl);
    if (!info.ok()) return info.status();
    ToProtoSession(*info, response);
    return absl::OkStatus();
  }();
  FinishUnary(reactor, context, "OpenSession", status);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::ForkSession(grpc::CallbackServerContext* context,
                                                        const v1::ForkSessionRequest* request,
                                                        v1::Session* response) {
  auto* reactor = context->DefaultReactor();
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<const ServingCore*> core = Admit();
    if (!core.ok()) return core.status();
    if (absl::Status s =
            CheckSessionId(request->parent_session_id(), options_.limits, "parent_session_id");
        !s.ok()) {
      return s;
    }
    absl::StatusOr<absl::Duration> ttl = SessionTtl(request->ttl(), "ttl");
    if (!ttl.ok()) return ttl.status();
    absl::StatusOr<engine::SessionInfo> info =
        (*core)->engine->ForkSession(request->parent_session_id(), *ttl);
    if (!info.ok()) return info.status();
    ToProtoSession(*info, response);
    return absl::OkStatus();
  }();
  FinishUnary(reactor, context, "ForkSession", status);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::CloseSession(grpc::CallbackServerContext* context,
                                                         const v1::CloseSessionRequest* request,
                                                         v1::CloseSessionResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<const ServingCore*> core = Admit();
    if (!core.ok()) return core.status();
    if (absl::Status s = CheckSessionId(request->session_id(), options_.limits, "session_id");
        !s.ok()) {
      return s;
    }
    return (*core)->engine->CloseSession(request->session_id());
  }();
  FinishUnary(reactor, context, "CloseSession", status);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::GetSession(grpc::CallbackServerContext* context,
                                                       const v1::GetSessionRequest* request,
                                                       v1::Session* response) {
  auto* reactor = context->DefaultReactor();
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<const ServingCore*> core = Admit();
    if (!core.ok()) return core.status();
    if (absl::Status s = CheckSessionId(request->session_id(), options_.limits, "session_id");
        !s.ok()) {
      return s;
    }
    absl::StatusOr<engine::SessionInfo> info = (*core)->engine->GetSession(request->session_id());
    if (!info.ok()) return info.status();
    ToProtoSession(*info, response);
    return absl::OkStatus();
  }();
  FinishUnary(reactor, context, "GetSession", status);
  return reactor;
}

}  // namespace kvserve::service
