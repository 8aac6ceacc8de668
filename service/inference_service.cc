#include "service/inference_service.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/tsan_annotations.h"
#include "service/grpc_status.h"
#include "service/session_metadata.h"

namespace kvserve::service {
namespace {

// Copies a session call's answer into the response; for a new session (OpenSession,
// ForkSession pass their `context`) also its id into the initial metadata
// (service/session_metadata.h).
absl::Status ReplySession(const absl::StatusOr<engine::SessionInfo>& info, v1::Session* response,
                          grpc::CallbackServerContext* context = nullptr) {
  if (!info.ok()) return info.status();
  ToProtoSession(*info, response);
  if (context != nullptr) {
    context->AddInitialMetadata(kSessionIdMetadataKey, response->session_id());
  }
  return absl::OkStatus();
}

// A unary call its handler answers before returning (the reactor RunUnary returns).
// Unlike context->DefaultReactor(), it tells ThreadSanitizer that the response written
// on the handler's thread goes to the gRPC thread that runs OnDone and then destroys the
// response (common/tsan_annotations.h).
class AnsweredUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit AnsweredUnaryReactor(const grpc::Status& status) {
    // Before the handler returns this reactor, Finish only records the status in it (gRPC
    // sends it once it binds the call), so no reaction can run before this release.
    Finish(status);
    common::TsanRelease(this);
  }
  void OnDone() override {
    common::TsanAcquire(this);
    delete this;
  }
};

// A unary call answered later, from whichever thread has the answer (a session call
// that waits for the session cache service): exactly one Answer.
class DeferredUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  void Answer(const grpc::Status& status) {
    common::TsanRelease(this);  // the response written on this thread, read by gRPC's
    Finish(status);
  }
  void OnDone() override {
    common::TsanAcquire(this);
    delete this;
  }
};

}  // namespace

InferenceService::InferenceService(Options options, Metrics* metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      clock_(options_.clock != nullptr ? options_.clock : common::Clock::Real()),
      writer_(clock_) {}

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

absl::StatusOr<InferenceService::Caller> InferenceService::Admit(
    std::optional<std::string_view> authorization) const {
  std::string tenant;
  if (options_.auth.has_value()) {
    absl::StatusOr<std::string> name = options_.auth->AuthenticateHeader(authorization);
    if (!name.ok()) return name.status();
    tenant = *std::move(name);
  }
  if (draining_.load()) return absl::UnavailableError("server is draining; retry elsewhere");
  const ServingCore* core = core_.load();
  if (core == nullptr) return absl::UnavailableError("model is loading; retry later");
  return Caller{core, std::move(tenant)};
}

absl::StatusOr<InferenceService::Caller> InferenceService::Admit(
    const grpc::CallbackServerContext* context) const {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(server::BearerAuth::kAuthorizationKey);
  if (it == metadata.end()) return Admit(std::nullopt);
  return Admit(std::string_view(it->second.data(), it->second.size()));
}

absl::StatusOr<engine::Request> InferenceService::PrepareGeneration(
    const Caller& caller, absl::Time deadline, const v1::GenerateRequest& request) const {
  if (deadline <= absl::Now()) {
    return absl::DeadlineExceededError("deadline expired before the request was queued");
  }
  const ServingCore& core = *caller.core;
  absl::StatusOr<engine::Request> out =
      ToEngineRequest(request, options_.limits, *core.tokenizer, deadline, core.chat);
  if (out.ok()) out->tenant = caller.tenant;
  return out;
}

absl::Status InferenceService::GenerationStatus(engine::FinishReason reason,
                                                const absl::Status& engine_status) const {
  if (reason == engine::FinishReason::kCancelled && draining_.load()) {
    return absl::UnavailableError("server shut down before the request finished; retry");
  }
  // A session turn checked against the session cache's record is refused through the
  // sink (engine::Engine::Submit), with the engine's field paths like Submit's.
  return WithProtoFieldNames(FinishStatus(reason, engine_status));
}

grpc::Status InferenceService::FinalStatus(grpc::CallbackServerContext* context, const char* method,
                                           const absl::Status& status) const {
  if (WantsRetryHint(status)) AddRetryHint(context, options_.retry_after);
  grpc::Status grpc_status = ToGrpcStatus(status);
  metrics_->RecordRpc(kGrpc, method, GrpcCodeName(grpc_status.error_code()));
  return grpc_status;
}

grpc::ServerUnaryReactor* InferenceService::RunUnary(
    grpc::CallbackServerContext* context, const char* method,
    absl::FunctionRef<absl::Status(const Caller& caller)> body) const {
  absl::StatusOr<Caller> caller = Admit(context);
  const absl::Status status = caller.ok() ? body(*caller) : caller.status();
  return new AnsweredUnaryReactor(FinalStatus(context, method, status));
}

grpc::ServerUnaryReactor* InferenceService::RunOnSession(
    grpc::CallbackServerContext* context, const char* method, const std::string& session_id,
    const char* field, absl::FunctionRef<void(const Caller& caller, Answer answer)> body) const {
  auto* reactor = new DeferredUnaryReactor();
  Answer answer = [this, reactor, context, method](absl::Status status) {
    reactor->Answer(FinalStatus(context, method, status));
  };
  absl::StatusOr<Caller> caller = Admit(context);
  absl::Status status = caller.status();
  if (status.ok()) status = CheckSessionId(session_id, options_.limits, field);
  if (status.ok()) status = CheckSessionMetadata(context->client_metadata(), session_id, field);
  if (!status.ok()) {
    answer(status);
  } else {
    body(*caller, std::move(answer));
  }
  return reactor;
}

void InferenceService::StartGeneration(grpc::CallbackServerContext* context,
                                       const v1::GenerateRequest& request, GenerationCall* call) {
  absl::StatusOr<Caller> caller = Admit(context);
  if (!caller.ok()) return call->Reject(caller.status());
  if (absl::Status s =
          CheckSessionMetadata(context->client_metadata(), request.session_id(), "session_id");
      !s.ok()) {
    return call->Reject(s);
  }
  SubmitGeneration(*caller, CallDeadline(context), request, call);
}

void InferenceService::SubmitGeneration(const Caller& caller, absl::Time deadline,
                                        const v1::GenerateRequest& request, GenerationCall* call) {
  absl::StatusOr<engine::Request> engine_request = PrepareGeneration(caller, deadline, request);
  if (!engine_request.ok()) return call->Reject(engine_request.status());
  SubmitPrepared(caller, *std::move(engine_request), request.top_logprobs() > 0, call);
}

void InferenceService::SubmitPrepared(const Caller& caller, engine::Request request, bool logprobs,
                                      GenerationCall* call) {
  GenerationStarted();
  // The sink may finish the call, and the reactor go, before Submit returns.
  std::shared_ptr<CancelLink> link = call->cancel_link();
  engine::Engine* engine = caller.core->engine;
  absl::StatusOr<engine::RequestId> id =
      engine->Submit(std::move(request), call->NewSink(logprobs));
  if (!id.ok()) {
    call->Reject(WithProtoFieldNames(id.status()));
    GenerationEnded();
    return;
  }
  link->SetRequest(engine, *id);
}

grpc::ServerUnaryReactor* InferenceService::Generate(grpc::CallbackServerContext* context,
                                                     const v1::GenerateRequest* request,
                                                     v1::GenerateResponse* response) {
  auto* reactor = new UnaryGenerateReactor(this, context, response);
  StartGeneration(context, *request, reactor);
  common::TsanRelease(reactor);  // to its reactions on gRPC's threads
  return reactor;
}

grpc::ServerWriteReactor<v1::GenerateStreamResponse>* InferenceService::GenerateStream(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  auto* reactor = new StreamGenerateReactor(this, context);
  StartGeneration(context, *request, reactor);
  common::TsanRelease(reactor);  // to its reactions on gRPC's threads
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  return RunUnary(context, "Tokenize", [&](const Caller& caller) -> absl::Status {
    const ServingCore& core = *caller.core;
    if (static_cast<int64_t>(request->text().size()) > options_.limits.max_prompt_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("text is ", request->text().size(),
                                                     " bytes, at most ",
                                                     options_.limits.max_prompt_bytes, " allowed"));
    }
    for (int32_t id :
         core.tokenizer->Encode(request->text(), request->add_bos(), request->parse_special())) {
      response->add_token_ids(id);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::Detokenize(grpc::CallbackServerContext* context,
                                                       const v1::DetokenizeRequest* request,
                                                       v1::DetokenizeResponse* response) {
  return RunUnary(context, "Detokenize", [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<std::string> text = caller.core->tokenizer->DecodeChecked(
        std::span<const int32_t>(request->token_ids().data(), request->token_ids().size()));
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token_ids: ", std::string(text.status().message())));
    }
    response->set_text(*std::move(text));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::GetModelInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetModelInfoRequest* request,
                                                         v1::ModelInfo* response) {
  return RunUnary(context, "GetModelInfo", [&](const Caller& caller) -> absl::Status {
    const ServingCore& core = *caller.core;
    const model::Model& model = *core.model;
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
    response->set_backend(core.backend_name);
    const engine::SubmitLimits limits = core.engine->submit_limits();
    response->set_max_tokens_limit(limits.max_tokens_limit);
    response->set_max_stop_strings(limits.stop_limits.max_stop_strings);
    response->set_max_stop_string_bytes(limits.stop_limits.max_stop_string_bytes);
    response->set_max_stop_token_ids(limits.stop_limits.max_stop_token_ids);
    response->set_default_max_tokens(options_.limits.default_max_tokens);
    response->set_tokenizer_model(model.vocab().tokenizer_model);
    response->set_tokenizer_pre(model.vocab().tokenizer_pre);
    if (core.chat != nullptr) response->set_chat_template(std::string(core.chat->family_name()));
    response->set_sliding_window(model.config().sliding_window);
    response->set_kv_bytes_per_token(static_cast<int64_t>(core.engine->kv_layout().token_bytes()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::OpenSession(grpc::CallbackServerContext* context,
                                                        const v1::OpenSessionRequest* request,
                                                        v1::Session* response) {
  // No session id yet: admission only (RunOnSession's checks pass an empty id).
  auto* reactor = new DeferredUnaryReactor();
  absl::StatusOr<Caller> caller = Admit(context);
  absl::StatusOr<absl::Duration> ttl =
      caller.ok() ? SessionTtl(request->ttl(), "ttl") : caller.status();
  if (!ttl.ok()) {
    reactor->Answer(FinalStatus(context, "OpenSession", ttl.status()));
    return reactor;
  }
  caller->core->engine->OpenSessionAsync(
      *ttl, caller->tenant,
      [this, reactor, context, response](absl::StatusOr<engine::SessionInfo> info) {
        reactor->Answer(FinalStatus(context, "OpenSession", ReplySession(info, response, context)));
      });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::ForkSession(grpc::CallbackServerContext* context,
                                                        const v1::ForkSessionRequest* request,
                                                        v1::Session* response) {
  const std::string& parent = request->parent_session_id();
  return RunOnSession(context, "ForkSession", parent, "parent_session_id",
                      [&](const Caller& caller, Answer answer) {
                        absl::StatusOr<absl::Duration> ttl = SessionTtl(request->ttl(), "ttl");
                        if (!ttl.ok()) return answer(ttl.status());
                        caller.core->engine->ForkSessionAsync(
                            parent, *ttl, caller.tenant,
                            [answer = std::move(answer), response,
                             context](absl::StatusOr<engine::SessionInfo> info) {
                              answer(ReplySession(info, response, context));
                            });
                      });
}

grpc::ServerUnaryReactor* InferenceService::CloseSession(grpc::CallbackServerContext* context,
                                                         const v1::CloseSessionRequest* request,
                                                         v1::CloseSessionResponse* response) {
  const std::string& id = request->session_id();
  return RunOnSession(
      context, "CloseSession", id, "session_id", [&](const Caller& caller, Answer answer) {
        caller.core->engine->CloseSessionAsync(id, caller.tenant, std::move(answer));
      });
}

grpc::ServerUnaryReactor* InferenceService::GetSession(grpc::CallbackServerContext* context,
                                                       const v1::GetSessionRequest* request,
                                                       v1::Session* response) {
  const std::string& id = request->session_id();
  return RunOnSession(
      context, "GetSession", id, "session_id", [&](const Caller& caller, Answer answer) {
        caller.core->engine->GetSessionAsync(
            id, caller.tenant,
            [answer = std::move(answer), response](absl::StatusOr<engine::SessionInfo> info) {
              answer(ReplySession(info, response));
            });
      });
}

}  // namespace kvserve::service
