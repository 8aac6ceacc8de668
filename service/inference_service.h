// kvserve.v1.Inference over gRPC's callback API: stateless plumbing in front of the
// engine. Every method: admission (model attached, not draining) -> validate ->
// call the engine -> convert the status once -> record metrics.
#ifndef KVSERVE_SERVICE_INFERENCE_SERVICE_H_
#define KVSERVE_SERVICE_INFERENCE_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "kvserve/v1/inference.grpc.pb.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "service/metrics.h"
#include "service/request_convert.h"

namespace kvserve::service {

// What the service serves once the model is loaded. Not owned by the service.
struct ServingCore {
  const model::Model* model = nullptr;
  const model::Tokenizer* tokenizer = nullptr;
  engine::Engine* engine = nullptr;
  std::string backend_name;
};

// Threading: RPC methods run on gRPC's callback threads and never block; engine sinks
// run on the engine's step thread and only queue writes: stream writes are started on
// the service's own writer thread, so gRPC's write work never slows the engine.
// Attach/StartDraining/WaitIdle may be called from any thread. The service must
// outlive the grpc::Server it is registered with (its destructor joins the writer).
class InferenceService final : public v1::Inference::CallbackService {
 public:
  struct Options {
    // Per-request limits (max tokens, prompt bytes...). vocab_size and context_length
    // are taken from the attached model. Keep max_tokens_limit and max_cache_salt_bytes
    // equal to the engine's options. Session TTL defaults and limits are the engine's.
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
  };

  // `metrics` must outlive the service.
  InferenceService(Options options, Metrics* metrics);
  // Runs the queued writer tasks, then joins the writer thread.
  ~InferenceService() override;
  InferenceService(const InferenceService&) = delete;
  InferenceService& operator=(const InferenceService&) = delete;

  // Starts serving `core` (which must outlive every call; call once). Before it every
  // method answers UNAVAILABLE ("model is loading").
  void Attach(const ServingCore* core);
  // From now on new calls answer UNAVAILABLE; calls in flight go on. Idempotent.
  void StartDraining();
  bool draining() const { return draining_.load(); }
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

  // Used by the generation calls (implementation details, public for them).
  // The core when serving, else UNAVAILABLE (not attached or draining).
  absl::StatusOr<const ServingCore*> Admit() const;
  // Validates `request` against the core and the call's deadline.
  absl::StatusOr<engine::Request> PrepareGeneration(const ServingCore& core,
                                                    grpc::CallbackServerContext* context,
                                                    const v1::GenerateRequest& request) const;
  // Finishes a unary call: converts `status` once, adds the retry hint where it
  // applies, records the RPC metric.
  void FinishUnary(grpc::ServerUnaryReactor* reactor, grpc::CallbackServerContext* context,
                   const char* method, const absl::Status& status) const;
  // Converts and records the final status of a generation call (adds the retry hint).
  grpc::Status FinalStatus(grpc::CallbackServerContext* context, const char* method,
                           const absl::Status& status) const;
  // The status a generation ending with `reason` gives; a cancellation caused by the
  // drain (engine shutdown) becomes UNAVAILABLE so that clients retry elsewhere.
  absl::Status GenerationStatus(engine::FinishReason reason,
                                const absl::Status& engine_status) const;
  void GenerationStarted();
  void GenerationEnded();
  Metrics* metrics() const { return metrics_; }
  // Runs `task` on the writer thread, in submission order. Never blocks for long
  // (used by the engine's step thread). Thread-safe.
  void RunOnWriter(std::function<void()> task);
  // Runs `task` on the writer thread once `when` has come (tasks due at the same time in
  // submission order); at shutdown, tasks not yet due run at once. Thread-safe.
  void RunOnWriterAt(absl::Time when, std::function<void()> task);
  const Options& options() const { return options_; }

 private:
  void WriterLoop();

  const Options options_;
  Metrics* const metrics_;
  std::atomic<const ServingCore*> core_{nullptr};
  std::atomic<bool> draining_{false};

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;
  bool wait_idle_ended_ ABSL_GUARDED_BY(mu_) = false;

  std::mutex writer_mu_;
  std::condition_variable writer_cv_;
  std::deque<std::function<void()>> writer_tasks_ ABSL_GUARDED_BY(writer_mu_);
  // Tasks waiting for their time (a multimap keeps equal times in insertion order).
  std::multimap<absl::Time, std::function<void()>> writer_timed_ ABSL_GUARDED_BY(writer_mu_);
  bool writer_stop_ ABSL_GUARDED_BY(writer_mu_) = false;
  // Last member: started after everything it uses, joined in the destructor.
  std::thread writer_;
};

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_INFERENCE_SERVICE_H_
