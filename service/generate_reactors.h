// The gRPC side of one generation call (Generate, GenerateStream): its reactor, the
// engine sink that feeds it, and the link that forwards a cancelled call to the engine.
//
// Threads (which one runs each callback):
//   RPC (gRPC callback) thread: the constructors, Reject, NewSink, OnCancel, OnDone,
//     and the stream's OnWriteDone (which starts the next write or the finish).
//   Engine step thread: the sinks' OnToken/OnFinish. The unary call's Finish runs
//     there (the sink finishes it); so does each stream's first write (time to first
//     token), and a stream's Finish after one of its writes failed.
//   The service's writer executor (SerialExecutor): the stream's Kick, which starts its
//     later writes, delayed flushes (Options::stream_flush_interval) and its Finish.
// A reactor deletes itself in OnDone; sinks (owned by the engine) may outlive it but
// call nothing after their OnFinish.
#ifndef KVSERVE_SERVICE_GENERATE_REACTORS_H_
#define KVSERVE_SERVICE_GENERATE_REACTORS_H_

#include <memory>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "kvserve/v1/inference.grpc.pb.h"
#include "service/metrics.h"
#include "service/serial_executor.h"

namespace kvserve::service {

// What a generation call needs from the service that started it; the service outlives
// every call. Implemented (privately) by InferenceService. Thread-safe.
class GenerationHost {
 public:
  virtual ~GenerationHost() = default;

  // The status a generation ending with `reason` gives (a drain's cancellation becomes
  // UNAVAILABLE).
  virtual absl::Status GenerationStatus(engine::FinishReason reason,
                                        const absl::Status& engine_status) const = 0;
  // Converts a call's final status once, adds the retry hint, records the RPC metric.
  virtual grpc::Status FinalStatus(grpc::CallbackServerContext* context, const char* method,
                                   const absl::Status& status) const = 0;
  // A submitted generation has finished its call (after Finish).
  virtual void GenerationEnded() = 0;
  virtual Metrics& metrics() const = 0;
  // Where streams start their writes and finishes.
  virtual SerialExecutor& writer() = 0;
  // Options::stream_flush_interval.
  virtual absl::Duration stream_flush_interval() const = 0;
  // Options::deadline_slack.
  virtual absl::Duration deadline_slack() const = 0;
  // The time source of pacing and latency metrics (the writer's clock).
  virtual const common::Clock& clock() const = 0;
};

// The base of every generation call's engine sink: records the inter-token latency and
// the generation metrics of one request and hands its output to the call (Deliver, then
// Finish once with the call's final status). Engine step thread only.
class GenerationSink : public engine::RequestSink {
 public:
  // `deadline`: the call's (CallDeadline; InfiniteFuture for none).
  GenerationSink(GenerationHost* host, bool logprobs, absl::Time deadline)
      : host_(host), logprobs_(logprobs), deadline_(deadline) {}

  void OnToken(const engine::TokenEvent& event) final;
  void OnFinish(const absl::Status& status, engine::FinishReason reason,
                const engine::Usage& usage) final;

 protected:
  virtual void Deliver(const engine::TokenEvent& event) = 0;
  // `final_status` is the call's (GenerationHost::GenerationStatus).
  virtual void Finish(const absl::Status& final_status, engine::FinishReason reason,
                      const engine::Usage& usage) = 0;

  GenerationHost* const host_;
  const bool logprobs_;

 private:
  const absl::Time deadline_;
  std::optional<absl::Time> last_token_time_;
};

// The call's deadline (InfiniteFuture when it has none).
absl::Time CallDeadline(const grpc::CallbackServerContext* context);

// Links a call's cancellation (client cancel, deadline, write failure) to its engine
// request, whichever of "request submitted" and "call cancelled" happens first.
// Thread-safe.
class CancelLink {
 public:
  // The request was submitted to `engine`; cancels it at once if the call already was.
  void SetRequest(engine::Engine* engine, engine::RequestId id);
  // Cancels the engine request, now or once it is submitted.
  void Cancel();

 private:
  std::mutex mu_;
  engine::Engine* engine_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::optional<engine::RequestId> id_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// The part of a generation reactor that InferenceService::StartGeneration uses.
class GenerationCall {
 public:
  virtual ~GenerationCall() = default;
  // Ends the call before anything was submitted to the engine. RPC thread.
  virtual void Reject(const absl::Status& status) = 0;
  // The sink of this call's engine request (made once, just before Submit).
  virtual std::shared_ptr<engine::RequestSink> NewSink(bool logprobs) = 0;
  // Shared with the service, which outlives the reactor during Submit.
  const std::shared_ptr<CancelLink>& cancel_link() const { return cancel_link_; }

 private:
  const std::shared_ptr<CancelLink> cancel_link_ = std::make_shared<CancelLink>();
};

// Generate: the sink collects the output into `response` and finishes the call.
class UnaryGenerateReactor final : public grpc::ServerUnaryReactor, public GenerationCall {
 public:
  UnaryGenerateReactor(GenerationHost* host, grpc::CallbackServerContext* context,
                       v1::GenerateResponse* response)
      : host_(host), context_(context), response_(response) {}

  void Reject(const absl::Status& status) override;
  std::shared_ptr<engine::RequestSink> NewSink(bool logprobs) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  GenerationHost* const host_;
  grpc::CallbackServerContext* const context_;
  v1::GenerateResponse* const response_;
};

// GenerateStream with exactly one write in flight: tokens that arrive while a write (or
// a kick) is pending, or before the flush interval since the last write has passed,
// accumulate into the next message. The last message carries the finish reason and
// usage. State is guarded by mu_, and gRPC is called after unlocking (a reaction may
// run, and OnDone delete this, at once). Lifetime: Finish is only called in a state
// where no kick is scheduled, so OnDone cannot run before a scheduled kick has.
class StreamGenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateStreamResponse>,
                                    public GenerationCall {
 public:
  StreamGenerateReactor(GenerationHost* host, grpc::CallbackServerContext* context)
      : host_(host), context_(context) {}

  void Reject(const absl::Status& status) override;
  std::shared_ptr<engine::RequestSink> NewSink(bool logprobs) override;

  // Engine step thread (through the sink): one generated token.
  void PushToken(const engine::TokenEvent& event, bool logprobs);
  // Engine step thread: the request finished (once; nothing is pushed after it) and the
  // call ends with `final_status` (GenerationHost::GenerationStatus).
  void Complete(const absl::Status& final_status, engine::FinishReason reason,
                const engine::Usage& usage);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Where the write side is. Every transition happens under mu_.
  enum class State {
    kNoWriteYet,     // nothing written or scheduled; the first token's write starts at once
    kIdle,           // no write in flight, no kick scheduled
    kWriting,        // one write in flight; OnWriteDone continues
    kKickScheduled,  // a Kick is queued on the writer executor (now or at next_write_)
    kWriteFailed,    // a write failed: tokens are dropped, Complete finishes the call
    kFinished,       // Finish was called; only OnDone follows
  };

  // Writer executor: starts the write or finish scheduled by ScheduleKick or delayed
  // by Advance.
  void Kick();
  // Unless a write or kick is pending (they pick up what was appended), queues a Kick.
  // Releases `lock`.
  void ScheduleKick(std::unique_lock<std::mutex> lock);
  // In kIdle: starts the finish, the next write or a delayed kick, if any is due.
  // Releases `lock`; `this` may be deleted after it.
  void Advance(std::unique_lock<std::mutex> lock);
  // Finishes the call, with the pending message as the last write when `write_last`.
  // Releases `lock`; `this` may be deleted after it.
  void FinishCall(std::unique_lock<std::mutex> lock, bool write_last);

  GenerationHost* const host_;
  grpc::CallbackServerContext* const context_;

  std::mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kNoWriteYet;
  // Tokens appended since the last write started, and the message they make.
  int pending_events_ ABSL_GUARDED_BY(mu_) = 0;
  v1::GenerateStreamResponse pending_ ABSL_GUARDED_BY(mu_);
  // The message being written; touched only in kWriting (or after kFinished).
  v1::GenerateStreamResponse in_flight_;
  // The earliest time the next (not last) write may start.
  absl::Time next_write_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Set by Complete: the status the call ends with.
  std::optional<absl::Status> final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_GENERATE_REACTORS_H_
