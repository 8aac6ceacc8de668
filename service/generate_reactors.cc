#include "service/generate_reactors.h"

#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/time/clock.h"
#include "common/tsan_annotations.h"
#include "service/request_convert.h"

namespace kvserve::service {
namespace {

constexpr char kGenerate[] = "Generate";
constexpr char kGenerateStream[] = "GenerateStream";

// Collects a unary generation into the response and finishes the call.
class UnarySink final : public GenerationSink {
 public:
  UnarySink(GenerationHost* host, grpc::CallbackServerContext* context,
            UnaryGenerateReactor* reactor, v1::GenerateResponse* response, bool logprobs)
      : GenerationSink(host, logprobs, CallDeadline(context)),
        context_(context),
        reactor_(reactor),
        response_(response) {}

 private:
  void Deliver(const engine::TokenEvent& event) override {
    response_->mutable_text()->append(event.text);
    AppendToken(event, logprobs_, response_->mutable_token_ids(), response_->mutable_logprobs());
  }

  void Finish(const absl::Status& final_status, engine::FinishReason reason,
              const engine::Usage& usage) override {
    if (final_status.ok()) {
      response_->set_finish_reason(ToProtoFinishReason(reason));
      ToProtoUsage(usage, response_->mutable_usage());
    }
    GenerationHost* host = host_;
    // The response goes to gRPC's thread (OnDone, then gRPC destroys it).
    common::TsanRelease(reactor_);
    // After Finish the reactor, context and response may be gone.
    reactor_->Finish(host->FinalStatus(context_, kGenerate, final_status));
    host->GenerationEnded();
  }

  grpc::CallbackServerContext* const context_;
  UnaryGenerateReactor* const reactor_;
  v1::GenerateResponse* const response_;
};

// Forwards engine output to a StreamGenerateReactor.
class StreamSink final : public GenerationSink {
 public:
  StreamSink(GenerationHost* host, StreamGenerateReactor* reactor, bool logprobs,
             absl::Time deadline)
      : GenerationSink(host, logprobs, deadline), reactor_(reactor) {}

 private:
  void Deliver(const engine::TokenEvent& event) override { reactor_->PushToken(event, logprobs_); }
  void Finish(const absl::Status& final_status, engine::FinishReason reason,
              const engine::Usage& usage) override {
    reactor_->Complete(final_status, reason, usage);
  }

  StreamGenerateReactor* const reactor_;
};

}  // namespace

void GenerationSink::OnToken(const engine::TokenEvent& event) {
  const absl::Time now = host_->clock().Now();
  if (last_token_time_.has_value()) {
    host_->metrics().RecordInterTokenLatency(now - *last_token_time_);
  }
  last_token_time_ = now;
  Deliver(event);
}

void GenerationSink::OnFinish(const absl::Status& status, engine::FinishReason reason,
                              const engine::Usage& usage) {
  // A call cancelled at (or within deadline_slack before) its deadline has expired,
  // whichever noticed first: the client's deadline timer (which cancels the call), gRPC's
  // or the engine's deadline check. Its client sees DEADLINE_EXCEEDED, and so do the
  // metrics. Deadlines are gRPC's, on the wall clock.
  if (reason == engine::FinishReason::kCancelled &&
      absl::Now() >= deadline_ - host_->deadline_slack()) {
    reason = engine::FinishReason::kDeadline;
  }
  host_->metrics().RecordGeneration(reason, usage);
  Finish(host_->GenerationStatus(reason, status), reason, usage);
}

absl::Time CallDeadline(const grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

void CancelLink::SetRequest(engine::Engine* engine, engine::RequestId id) {
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    engine_ = engine;
    id_ = id;
    cancel = cancelled_;
  }
  if (cancel) engine->Cancel(id);
}

void CancelLink::Cancel() {
  engine::Engine* engine = nullptr;
  std::optional<engine::RequestId> id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    engine = engine_;
    id = id_;
  }
  if (id.has_value()) engine->Cancel(*id);
}

void UnaryGenerateReactor::Reject(const absl::Status& status) {
  common::TsanRelease(this);
  Finish(host_->FinalStatus(context_, kGenerate, status));
}

std::shared_ptr<engine::RequestSink> UnaryGenerateReactor::NewSink(bool logprobs) {
  return std::make_shared<UnarySink>(host_, context_, this, response_, logprobs);
}

void UnaryGenerateReactor::OnCancel() {
  common::TsanAcquire(this);
  cancel_link()->Cancel();
}

void UnaryGenerateReactor::OnDone() {
  common::TsanAcquire(this);
  delete this;
}

void StreamGenerateReactor::Reject(const absl::Status& status) {
  common::TsanRelease(this);
  Finish(host_->FinalStatus(context_, kGenerateStream, status));
}

std::shared_ptr<engine::RequestSink> StreamGenerateReactor::NewSink(bool logprobs) {
  return std::make_shared<StreamSink>(host_, this, logprobs, CallDeadline(context_));
}

void StreamGenerateReactor::PushToken(const engine::TokenEvent& event, bool logprobs) {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == State::kWriteFailed) return;  // the client is gone; the cancel is on its way
  pending_.mutable_text()->append(event.text);
  AppendToken(event, logprobs, pending_.mutable_token_ids(), pending_.mutable_logprobs());
  ++pending_events_;
  if (state_ == State::kNoWriteYet) {
    // The first token goes out at once, from this thread (time to first token); it is
    // one write per call, and later ones are started by Kick or OnWriteDone.
    state_ = State::kIdle;
    Advance(std::move(lock));
    return;
  }
  ScheduleKick(std::move(lock));
}

void StreamGenerateReactor::Complete(const absl::Status& final_status, engine::FinishReason reason,
                                     const engine::Usage& usage) {
  std::unique_lock<std::mutex> lock(mu_);
  if (final_status.ok()) {
    pending_.set_finish_reason(ToProtoFinishReason(reason));
    ToProtoUsage(usage, pending_.mutable_usage());
  }
  final_status_ = final_status;
  if (state_ == State::kWriteFailed) {
    FinishCall(std::move(lock), /*write_last=*/false);
    return;
  }
  ScheduleKick(std::move(lock));
}

void StreamGenerateReactor::Kick() {
  std::unique_lock<std::mutex> lock(mu_);
  state_ = State::kIdle;     // was kKickScheduled
  Advance(std::move(lock));  // `this` may be deleted from here on
}

void StreamGenerateReactor::OnWriteDone(bool ok) {
  common::TsanAcquire(this);
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == State::kFinished) return;  // the last write, started with the finish
  if (!ok) {
    if (final_status_.has_value()) {
      FinishCall(std::move(lock), /*write_last=*/false);
      return;
    }
    state_ = State::kWriteFailed;
    pending_.Clear();
    pending_events_ = 0;
    lock.unlock();
    cancel_link()->Cancel();  // the client is gone: stop generating; Complete follows
    return;
  }
  state_ = State::kIdle;  // was kWriting
  Advance(std::move(lock));
}

void StreamGenerateReactor::OnCancel() {
  common::TsanAcquire(this);
  cancel_link()->Cancel();
}

void StreamGenerateReactor::OnDone() {
  common::TsanAcquire(this);
  delete this;
}

void StreamGenerateReactor::ScheduleKick(std::unique_lock<std::mutex> lock) {
  if (state_ != State::kNoWriteYet && state_ != State::kIdle) return;
  state_ = State::kKickScheduled;
  lock.unlock();
  host_->writer().Post([this] { Kick(); });
}

void StreamGenerateReactor::Advance(std::unique_lock<std::mutex> lock) {
  if (final_status_.has_value()) {
    FinishCall(std::move(lock), /*write_last=*/final_status_->ok());
    return;
  }
  if (pending_events_ == 0) return;
  const absl::Time now = host_->clock().Now();
  if (now < next_write_) {
    // Too soon after the last write (Options::stream_flush_interval): come back when it
    // is due; tokens that arrive meanwhile join this message.
    state_ = State::kKickScheduled;
    const absl::Time when = next_write_;
    lock.unlock();
    host_->writer().PostAt(when, [this] { Kick(); });
    return;
  }
  next_write_ = now + host_->stream_flush_interval();
  in_flight_.Swap(&pending_);
  pending_.Clear();
  pending_events_ = 0;
  state_ = State::kWriting;
  lock.unlock();
  common::TsanRelease(this);  // in_flight_ and this reactor go to OnWriteDone's thread
  StartWrite(&in_flight_);
}

void StreamGenerateReactor::FinishCall(std::unique_lock<std::mutex> lock, bool write_last) {
  state_ = State::kFinished;
  if (write_last) in_flight_.Swap(&pending_);
  const absl::Status final_status = *final_status_;
  lock.unlock();
  GenerationHost* host = host_;
  const grpc::Status status = host->FinalStatus(context_, kGenerateStream, final_status);
  common::TsanRelease(this);  // everything this call wrote goes to OnDone's thread
  // After these calls `this` may be deleted at any moment.
  if (write_last) {
    StartWriteAndFinish(&in_flight_, grpc::WriteOptions(), status);
  } else {
    Finish(status);
  }
  host->GenerationEnded();
}

}  // namespace kvserve::service
