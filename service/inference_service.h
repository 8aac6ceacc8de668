// kvserve.v1.Inference over gRPC's callback API: stateless plumbing in front of the
// engine. Every method: admission (authenticated, model attached, not draining) ->
// validate -> call the engine -> convert the status once -> record metrics. Validation
// includes the "kvserve-session-id" metadata of session calls (service/session_metadata.h). The
// generation calls' reactors and engine sinks are in service/generate_reactors.h.
//
// Authentication (Options::auth): every call of this service carries
// "authorization: Bearer TOKEN" with a listed token, else UNAUTHENTICATED; the token's
// name is the call's tenant. Sessions belong to the tenant that opened them (another
// tenant's session is NOT_FOUND, as an unknown id), and KV is only shared within a
// tenant (engine::TenantCacheSalt). Other services on the same server (health,
// reflection) are not covered: they stay open for probes and tools.
#ifndef KVSERVE_SERVICE_INFERENCE_SERVICE_H_
#define KVSERVE_SERVICE_INFERENCE_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "kvserve/v1/inference.grpc.pb.h"
#include "model/chat_prompter.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "server/bearer_auth.h"
#include "service/generate_reactors.h"
#include "service/metrics.h"
#include "service/request_convert.h"
#include "service/serial_executor.h"

namespace kvserve::service {

// What the service serves once the model is loaded. Not owned by the service.
struct ServingCore {
  const model::Model* model = nullptr;
  const model::Tokenizer* tokenizer = nullptr;
  const model::ChatPrompter* chat = nullptr;  // renders GenerateRequest.messages
  engine::Engine* engine = nullptr;
  std::string backend_name;
};

// Threading:
// - The RPC methods run on gRPC's callback threads and never wait for a generation.
//   Every method but Generate/GenerateStream finishes its call before returning.
// - Generate is finished by its engine sink on the engine's step thread (or on the RPC
//   thread when rejected before reaching the engine).
// - GenerateStream's first write starts on the engine's step thread; later writes,
//   delayed flushes and the finish start on the service's writer executor (one
//   thread, SerialExecutor) or from OnWriteDone on a gRPC thread. The callbacks of
//   each reactor are listed in service/generate_reactors.h.
// - Attach/StartDraining/WaitIdle/EndWaitIdle may be called from any thread.
// Lifetime: the service must outlive the grpc::Server it is registered with and the
// engine's sinks (its destructor drains the writer executor, then joins it).
class InferenceService final : public v1::Inference::CallbackService, private GenerationHost {
 public:
  struct Options {
    // The wire-only request limits (default max_tokens, prompt bytes, session id bytes).
    // Every other limit is the engine's (Engine::submit_limits, session options), which
    // also validates every request field (engine/field_error.h), once.
    RequestLimits limits;
    // Hint sent with RESOURCE_EXHAUSTED and UNAVAILABLE answers. Default 1 second.
    absl::Duration retry_after = absl::Seconds(1);
    // GenerateStream: after a write starts, the next one waits until this much time has
    // passed; tokens produced meanwhile go out together in one message. Bounds the
    // messages per second of a stream (each costs gRPC a few tens of microseconds of
    // CPU) for small fast models, at the price of up to this much extra latency per
    // token; a model slower than one token per interval is unaffected. The first token
    // always goes out at once. 0 writes every token as soon as the previous write is
    // done. Default 1 ms.
    absl::Duration stream_flush_interval = absl::Milliseconds(1);
    // A generation cancelled less than this before its call's deadline (or after it)
    // counts as expired, DEADLINE_EXCEEDED in its status and metrics: its client's
    // deadline timer fired. The client's deadline precedes the server's by the time the
    // request took to reach the server, so the client's cancellation arrives before the
    // server's own deadline. Default 250 ms.
    absl::Duration deadline_slack = absl::Milliseconds(250);
    // The time source of stream pacing, inter-token latencies and the writer's timed
    // tasks; null = the wall clock. Tests inject a common::testing::FakeClock. Call
    // deadlines stay gRPC's (wall clock).
    const common::Clock* clock = nullptr;
    // Bearer tokens every call must carry, each naming its tenant; nullopt = no
    // authentication (every caller is the empty tenant). Default nullopt.
    std::optional<server::BearerAuth> auth;
  };

  // `metrics` must outlive the service.
  InferenceService(Options options, Metrics* metrics);
  InferenceService(const InferenceService&) = delete;
  InferenceService& operator=(const InferenceService&) = delete;

  // Starts serving `core` (which must outlive every call; call once). Before it every
  // method answers UNAVAILABLE ("model is loading").
  void Attach(const ServingCore* core);
  // From now on new calls answer UNAVAILABLE; calls in flight go on. Idempotent.
  void StartDraining();
  bool draining() const { return draining_.load(); }
  // Attached and not draining (what readiness probes ask).
  bool ready() const { return core_.load() != nullptr && !draining_.load(); }
  // Blocks until no generation is in flight, `deadline` passes or EndWaitIdle() is
  // called; true when idle.
  bool WaitIdle(absl::Time deadline);
  // Makes every current and later WaitIdle return at once (a second shutdown signal
  // ends the drain's grace period). Idempotent.
  void EndWaitIdle();
  // Generations (Generate/GenerateStream) in flight.
  int inflight_generations() const;

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override;
  grpc::ServerWriteReactor<v1::GenerateStreamResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* context,
                                        const v1::OpenSessionRequest* request,
                                        v1::Session* response) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* context,
                                        const v1::ForkSessionRequest* request,
                                        v1::Session* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const v1::CloseSessionRequest* request,
                                         v1::CloseSessionResponse* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const v1::GetSessionRequest* request,
                                       v1::Session* response) override;

  // --- For the service's other front, the OpenAI-compatible HTTP API (service/http_api.h):
  // the same admission, validation, engine and metrics as the gRPC methods.

  // An admitted call: what serves it and who sent it.
  struct Caller {
    const ServingCore* core;  // never null
    std::string tenant;       // the token's name; empty without Options::auth
  };
  // The one admission check of every call: UNAUTHENTICATED (Options::auth, checked
  // first so that an unauthenticated caller learns nothing else; `authorization` is the
  // "Bearer TOKEN" the caller sent, nullopt when none), else UNAVAILABLE (not attached
  // or draining), else the caller.
  absl::StatusOr<Caller> Admit(std::optional<std::string_view> authorization) const;
  // A generation of an admitted caller, as Generate starts one, in two halves (so that a
  // front submitting one request several times, the HTTP API's n choices, converts it
  // once): the conversion (service/request_convert.h, with the caller's tenant; the
  // wire-limit errors), then the submission (the engine validates the fields; its field
  // errors come back renamed to proto paths through `call`'s Reject). `call`'s sink must
  // derive from GenerationSink over generation_host() and call GenerationEnded() after
  // its Finish; `logprobs`: the call reports them.
  absl::StatusOr<engine::Request> PrepareGeneration(const Caller& caller, absl::Time deadline,
                                                    const v1::GenerateRequest& request) const;
  void SubmitPrepared(const Caller& caller, engine::Request request, bool logprobs,
                      GenerationCall* call);
  // What the sinks of SubmitPrepared's calls report to.
  GenerationHost* generation_host() { return this; }
  const Options& options() const { return options_; }

 private:
  // GenerationHost, for the reactors and sinks of generation calls.
  absl::Status GenerationStatus(engine::FinishReason reason,
                                const absl::Status& engine_status) const override;
  grpc::Status FinalStatus(grpc::CallbackServerContext* context, const char* method,
                           const absl::Status& status) const override;
  void GenerationEnded() override;
  Metrics& metrics() const override { return *metrics_; }
  SerialExecutor& writer() override { return writer_; }
  absl::Duration stream_flush_interval() const override { return options_.stream_flush_interval; }
  absl::Duration deadline_slack() const override { return options_.deadline_slack; }
  const common::Clock& clock() const override { return *clock_; }

  // Admit for a gRPC call: its "authorization" metadata.
  absl::StatusOr<Caller> Admit(const grpc::CallbackServerContext* context) const;
  // A unary method that needs the serving core: admission, then `body` (validation and
  // the call; it fills the response), then the call's finish with the status converted
  // once, the retry hint where it applies and the RPC metric. RPC thread.
  grpc::ServerUnaryReactor* RunUnary(
      grpc::CallbackServerContext* context, const char* method,
      absl::FunctionRef<absl::Status(const Caller& caller)> body) const;
  // A session call (which may wait for the session cache service; never on the RPC
  // thread): admission, then `body` once `session_id` passed CheckSessionId (errors name
  // it `field`) and the session metadata check; `body` starts the engine call and
  // hands it `answer`, which finishes the call (from any thread, exactly once) with the
  // status converted once, the retry hint where it applies and the RPC metric.
  using Answer = std::function<void(absl::Status)>;
  grpc::ServerUnaryReactor* RunOnSession(
      grpc::CallbackServerContext* context, const char* method, const std::string& session_id,
      const char* field, absl::FunctionRef<void(const Caller& caller, Answer answer)> body) const;
  // Generate and GenerateStream: admission, the session metadata check, then
  // SubmitGeneration (PrepareGeneration + SubmitPrepared; a failure rejects `call`).
  void StartGeneration(grpc::CallbackServerContext* context, const v1::GenerateRequest& request,
                       GenerationCall* call);
  void SubmitGeneration(const Caller& caller, absl::Time deadline,
                        const v1::GenerateRequest& request, GenerationCall* call);
  void GenerationStarted();

  const Options options_;
  Metrics* const metrics_;
  std::atomic<const ServingCore*> core_{nullptr};
  std::atomic<bool> draining_{false};

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;
  bool wait_idle_ended_ ABSL_GUARDED_BY(mu_) = false;

  // Last member: destroyed (drained and joined) first, while everything its tasks use
  // is still there.
  const common::Clock* const clock_;  // options_.clock or the wall clock
  SerialExecutor writer_;
};

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_INFERENCE_SERVICE_H_
