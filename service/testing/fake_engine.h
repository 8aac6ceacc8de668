// A scriptable engine::Engine for service-layer tests (validation, status mapping,
// overload, drain, cancellation). Test-only: the server never ships it.
//
// Submitted requests are held until the test emits tokens and finishes them
// (Emit/Finish), or finished at once with `immediate_tokens` when that is set.
// Cancel() finishes a held request with kCancelled, as the real engine does.
// Threading: every method is thread-safe; sinks are called without the lock held.
#ifndef KVSERVE_SERVICE_TESTING_FAKE_ENGINE_H_
#define KVSERVE_SERVICE_TESTING_FAKE_ENGINE_H_

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/engine.h"

namespace kvserve::service::testing {

class FakeEngine final : public engine::Engine {
 public:
  // Next Submit answers this status instead of queuing (then resets to OK).
  void FailNextSubmit(absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    next_submit_status_ = std::move(status);
  }
  // When set, Submit emits these tokens and finishes with kLength before returning.
  void SetImmediateTokens(std::vector<engine::TokenEvent> tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    immediate_tokens_ = std::move(tokens);
  }

  absl::StatusOr<engine::RequestId> Submit(engine::Request request,
                                           std::shared_ptr<engine::RequestSink> sink) override {
    std::optional<std::vector<engine::TokenEvent>> immediate;
    engine::RequestId id = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_down_) return absl::UnavailableError("engine is shut down");
      if (!next_submit_status_.ok()) {
        absl::Status s = std::move(next_submit_status_);
        next_submit_status_ = absl::OkStatus();
        return s;
      }
      // Like the real engine: a turn needs a live session of the request's tenant.
      if (!request.session_id.empty() && (!sessions_.contains(request.session_id) ||
                                          session_tenants_[request.session_id] != request.tenant)) {
        return absl::NotFoundError("unknown session");
      }
      id = ++last_id_;
      submitted_.push_back(request);
      if (immediate_tokens_.has_value()) {
        immediate = immediate_tokens_;
      } else {
        held_[id] = sink;
      }
      cv_.notify_all();
    }
    if (immediate.has_value()) {
      for (const engine::TokenEvent& t : *immediate) sink->OnToken(t);
      engine::Usage usage;
      usage.prompt_tokens = static_cast<int32_t>(request.prompt_tokens.size());
      usage.completion_tokens = static_cast<int32_t>(immediate->size());
      sink->OnFinish(absl::OkStatus(), engine::FinishReason::kLength, usage);
    }
    return id;
  }

  void Cancel(engine::RequestId id) override {
    std::shared_ptr<engine::RequestSink> sink;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_.push_back(id);
      auto it = held_.find(id);
      if (it == held_.end()) return;
      sink = it->second;
      held_.erase(it);
      cv_.notify_all();
    }
    sink->OnFinish(absl::OkStatus(), engine::FinishReason::kCancelled, engine::Usage{});
  }

  // Emits `text` as one token of a held request. False when it is not held.
  bool Emit(engine::RequestId id, int32_t token, const std::string& text) {
    std::shared_ptr<engine::RequestSink> sink = Held(id);
    if (sink == nullptr) return false;
    engine::TokenEvent event;
    event.token = token;
    event.text = text;
    sink->OnToken(event);
    return true;
  }

  // Finishes a held request. False when it is not held.
  bool Finish(engine::RequestId id, const absl::Status& status, engine::FinishReason reason,
              engine::Usage usage = {}) {
    std::shared_ptr<engine::RequestSink> sink;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = held_.find(id);
      if (it == held_.end()) return false;
      sink = it->second;
      held_.erase(it);
      cv_.notify_all();
    }
    sink->OnFinish(status, reason, usage);
    return true;
  }

  // Waits until `n` requests were submitted in total; returns the id of the n-th.
  std::optional<engine::RequestId> WaitSubmitted(size_t n, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, absl::ToChronoSeconds(timeout),
                      [&] { return submitted_.size() >= n; })) {
      return std::nullopt;
    }
    return static_cast<engine::RequestId>(n);
  }

  // Waits until request `id` is no longer held (finished or cancelled).
  bool WaitReleased(engine::RequestId id, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoSeconds(timeout), [&] { return held_.count(id) == 0; });
  }

  std::vector<engine::Request> submitted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  std::vector<engine::RequestId> cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

  // Sessions keep their tenant: another tenant's session is "unknown session", as the
  // real engine does.
  void OpenSessionAsync(absl::Duration ttl, const std::string& tenant,
                        SessionCallback done) override {
    done(OpenNow(ttl, tenant));
  }
  void ForkSessionAsync(const std::string& parent_id, absl::Duration ttl, const std::string& tenant,
                        SessionCallback done) override {
    done(ForkNow(parent_id, ttl, tenant));
  }
  void CloseSessionAsync(const std::string& id, const std::string& tenant,
                         StatusCallback done) override {
    done(CloseNow(id, tenant));
  }
  void GetSessionAsync(const std::string& id, const std::string& tenant,
                       SessionCallback done) override {
    done(GetNow(id, tenant));
  }
  absl::StatusOr<engine::SessionInfo> OpenNow(absl::Duration ttl, const std::string& tenant) {
    std::lock_guard<std::mutex> lock(mu_);
    engine::SessionInfo info;
    info.id = absl::StrCat("s", ++last_session_);
    info.expires_at = absl::Now() + (ttl > absl::ZeroDuration() ? ttl : absl::Minutes(10));
    sessions_[info.id] = info;
    session_tenants_[info.id] = tenant;
    return info;
  }
  absl::StatusOr<engine::SessionInfo> ForkNow(const std::string& parent_id, absl::Duration ttl,
                                              const std::string& tenant) {
    engine::SessionInfo parent;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sessions_.find(parent_id);
      if (it == sessions_.end() || session_tenants_[parent_id] != tenant) {
        return absl::NotFoundError("unknown session");
      }
      parent = it->second;
    }
    absl::StatusOr<engine::SessionInfo> child = OpenNow(ttl, tenant);
    if (child.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      sessions_[child->id].history_tokens = parent.history_tokens;
      child->history_tokens = parent.history_tokens;
    }
    return child;
  }
  absl::Status CloseNow(const std::string& id, const std::string& tenant) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!sessions_.contains(id) || session_tenants_[id] != tenant) {
      return absl::NotFoundError("unknown session");
    }
    sessions_.erase(id);
    return absl::OkStatus();
  }
  absl::StatusOr<engine::SessionInfo> GetNow(const std::string& id, const std::string& tenant) {
    std::lock_guard<std::mutex> lock(mu_);
    ++get_session_calls_;
    auto it = sessions_.find(id);
    if (it == sessions_.end() || session_tenants_[id] != tenant) {
      return absl::NotFoundError("unknown session");
    }
    return it->second;
  }
  // GetSession calls so far.
  int get_session_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return get_session_calls_;
  }
  // Sets a session's history length (as if turns had run).
  void SetHistory(const std::string& id, int32_t tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_[id].history_tokens = tokens;
  }

  engine::SubmitLimits submit_limits() const override { return submit_limits_; }
  // A two-layer f32 layout of kv_dim 8 (GetModelInfo reports its 128 bytes a token).
  model::KvLayout kv_layout() const override { return model::KvLayout{2, 8, 16}; }
  void SetSubmitLimits(engine::SubmitLimits limits) { submit_limits_ = limits; }

  engine::EngineStats Stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    engine::EngineStats stats;
    stats.running = static_cast<int32_t>(held_.size());
    stats.open_sessions = static_cast<int32_t>(sessions_.size());
    return stats;
  }

  void Shutdown(absl::Time deadline) override {
    std::map<engine::RequestId, std::shared_ptr<engine::RequestSink>> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      shut_down_ = true;
      held.swap(held_);
      cv_.notify_all();
    }
    for (auto& [id, sink] : held) {
      sink->OnFinish(absl::OkStatus(), engine::FinishReason::kCancelled, engine::Usage{});
    }
  }

 private:
  std::shared_ptr<engine::RequestSink> Held(engine::RequestId id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = held_.find(id);
    return it == held_.end() ? nullptr : it->second;
  }

  engine::SubmitLimits submit_limits_;  // set before the engine is shared
  int get_session_calls_ = 0;           // guarded by mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  absl::Status next_submit_status_;
  std::optional<std::vector<engine::TokenEvent>> immediate_tokens_;
  engine::RequestId last_id_ = 0;
  int last_session_ = 0;
  bool shut_down_ = false;
  std::vector<engine::Request> submitted_;
  std::vector<engine::RequestId> cancelled_;
  std::map<engine::RequestId, std::shared_ptr<engine::RequestSink>> held_;
  std::map<std::string, engine::SessionInfo> sessions_;
  std::map<std::string, std::string> session_tenants_;  // id -> tenant (kept after close)
};

}  // namespace kvserve::service::testing

#endif  // KVSERVE_SERVICE_TESTING_FAKE_ENGINE_H_
