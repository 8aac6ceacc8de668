// The request sink of the engine benchmarks: records when each token arrives and how the
// request ended, and lets the submitting thread block until it has.
#ifndef KVSERVE_BENCH_BLOCKING_SINK_H_
#define KVSERVE_BENCH_BLOCKING_SINK_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"

namespace kvserve::bench {

// Threading: the engine calls OnToken and OnFinish from its step thread; any one thread
// may Wait(). The accessors are for after Wait() returned (then nothing writes any more).
class BlockingSink final : public engine::RequestSink {
 public:
  using Clock = std::chrono::steady_clock;

  // Records the arrival time of a sampled token (a text-only flush is not a token).
  void OnToken(const engine::TokenEvent& event) override {
    if (event.token == engine::kTextOnlyToken) return;
    std::lock_guard<std::mutex> lock(mu_);
    token_times_.push_back(Clock::now());
    tokens_.push_back(event.token);
  }
  void OnFinish(const absl::Status& status, engine::FinishReason,
                const engine::Usage& usage) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    usage_ = usage;
    done_ = true;
    cv_.notify_all();
  }
  // Blocks until OnFinish; returns its status.
  absl::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    return status_;
  }

  const std::vector<Clock::time_point>& token_times() const { return token_times_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // parallel to token_times
  const engine::Usage& usage() const { return usage_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Clock::time_point> token_times_;
  std::vector<int32_t> tokens_;
  absl::Status status_;
  engine::Usage usage_;
  bool done_ = false;
};

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_BLOCKING_SINK_H_
