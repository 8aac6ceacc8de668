// Helpers for engine tests: a sink that records a request's output, and a one-call way
// to build an engine over a backend.
#ifndef KVSERVE_ENGINE_TESTING_ENGINE_TESTING_H_
#define KVSERVE_ENGINE_TESTING_ENGINE_TESTING_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "backends/backend.h"
#include "engine/engine.h"
#include "engine/engine_options.h"

namespace kvserve::engine::testing {

// Holds the step thread inside a sink callback until released.
class Gate {
 public:
  void BlockHere() {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  void WaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return entered_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool open_ = false;
};

// A copy of `status` that shares no storage with it. Copies of an absl::Status share
// their message and payloads behind a reference count kept inside Abseil, which
// ThreadSanitizer cannot see (Debian's Abseil is not instrumented): a test thread reading
// its copy while the step thread drops the sink's, the last other one, would be reported
// as a race. Results handed out of a sink carry unshared statuses.
inline absl::Status Unshared(const absl::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status copy(status.code(), std::string(status.message()));
  status.ForEachPayload([&copy](absl::string_view url, const absl::Cord& payload) {
    copy.SetPayload(url, absl::Cord(std::string(payload)));
  });
  return copy;
}

// What one request produced.
struct Result {
  std::vector<int32_t> tokens;  // sampled token ids (text-only events excluded)
  std::vector<float> logprobs;  // parallel to tokens
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // parallel to tokens
  std::string text;
  std::vector<std::string> event_texts;  // the text of each OnToken event, in order
  std::vector<int32_t> event_tokens;     // the token of each event (kTextOnlyToken too)
  absl::Status status;
  FinishReason reason = FinishReason::kError;
  Usage usage;
};

// Records events; Wait() blocks until OnFinish. `on_token` (optional) runs on the step
// thread after each recorded token event with the number of tokens so far.
// Threading: thread-safe.
class CollectingSink : public RequestSink {
 public:
  explicit CollectingSink(std::function<void(int)> on_token = nullptr)
      : on_token_(std::move(on_token)) {}

  void OnToken(const TokenEvent& event) override {
    int n = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      result_.text += event.text;
      result_.event_texts.push_back(event.text);
      result_.event_tokens.push_back(event.token);
      if (event.token != kTextOnlyToken) {
        result_.tokens.push_back(event.token);
        result_.logprobs.push_back(event.logprob);
        result_.top_logprobs.push_back(event.top_logprobs);
      }
      n = static_cast<int>(result_.tokens.size());
      if (finished_) bad_order_ = true;
    }
    if (on_token_) on_token_(n);
  }
  void OnFinish(const absl::Status& status, FinishReason reason, const Usage& usage) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) bad_order_ = true;
    result_.status = status;
    result_.reason = reason;
    result_.usage = usage;
    finished_ = true;
    ++finish_calls_;
    cv_.notify_all();
  }

  // Blocks until OnFinish, at most `timeout` (then a result with status
  // DEADLINE_EXCEEDED "test wait timed out", so a hung engine fails a test instead of
  // hanging it).
  Result Wait(absl::Duration timeout = absl::Seconds(120)) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [this] { return finished_; })) {
      Result timed_out = result_;
      timed_out.status = absl::DeadlineExceededError("test wait timed out");
      timed_out.reason = FinishReason::kError;
      return timed_out;
    }
    Result result = result_;
    result.status = Unshared(result_.status);
    return result;
  }
  bool finished() {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_;
  }
  // True when OnToken came after OnFinish or OnFinish came twice.
  bool bad_order() {
    std::lock_guard<std::mutex> lock(mu_);
    return bad_order_ || finish_calls_ > 1;
  }

 private:
  std::function<void(int)> on_token_;
  std::mutex mu_;
  std::condition_variable cv_;
  Result result_;
  bool finished_ = false;
  bool bad_order_ = false;
  int finish_calls_ = 0;
};

// An engine over a backend `backend_name` for `model` with `options`.
inline absl::StatusOr<std::unique_ptr<Engine>> MakeEngine(
    const model::Model& model, const Engine::Options& options,
    const std::string& backend_name = "reference") {
  auto backend = backends::CreateBackend(backend_name, model, options.KvLayoutFor(model.config()),
                                         backends::BackendOptions{});
  if (!backend.ok()) return backend.status();
  return CreateEngine(options, model, *std::move(backend));
}

// A greedy request (temperature 0, EOS ignored) for `max_tokens` tokens after `prompt`,
// with the `top_logprobs` most likely tokens of each step reported.
inline Request GreedyRequest(std::vector<int32_t> prompt, int max_tokens, int top_logprobs = 0) {
  Request r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  r.sampling.top_logprobs = top_logprobs;
  return r;
}

// Submits and waits. Submit errors come back as Result::status with reason kError.
inline Result RunRequest(Engine& engine, Request request) {
  auto sink = std::make_shared<CollectingSink>();
  auto id = engine.Submit(std::move(request), sink);
  if (!id.ok()) {
    Result r;
    r.status = id.status();
    return r;
  }
  return sink->Wait();
}

}  // namespace kvserve::engine::testing

#endif  // KVSERVE_ENGINE_TESTING_ENGINE_TESTING_H_
