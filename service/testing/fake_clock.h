// A manual Clock for tests: time moves only when the test calls Advance, and waiters
// (SerialExecutor's thread) are woken when it does. Test-only.
//
// Threading: every method is thread-safe. Objects waiting on this clock must not be
// destroyed while an Advance runs (tests advance and destroy from one thread).
#ifndef KVSERVE_SERVICE_TESTING_FAKE_CLOCK_H_
#define KVSERVE_SERVICE_TESTING_FAKE_CLOCK_H_

#include <condition_variable>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "service/clock.h"

namespace kvserve::service::testing {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'000'000)) : now_(start) {}

  absl::Time Now() const override {
    std::lock_guard<std::mutex> guard(mu_);
    return now_;
  }

  // Registers the waiter and waits for a notification: Advance notifies every
  // registered waiter under its own mutex, so no wake-up is lost between the time
  // check and the wait.
  void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 absl::Time deadline) const override {
    const Waiter waiter{&cv, lock.mutex()};
    {
      std::lock_guard<std::mutex> guard(mu_);
      if (now_ >= deadline) return;
      waiters_.insert(waiter);
    }
    cv.wait(lock);
    std::lock_guard<std::mutex> guard(mu_);
    waiters_.erase(waiters_.find(waiter));
  }

  // Moves the time forward by `d` and wakes every waiter.
  void Advance(absl::Duration d) {
    std::vector<Waiter> waiters;
    {
      std::lock_guard<std::mutex> guard(mu_);
      now_ += d;
      waiters.assign(waiters_.begin(), waiters_.end());
    }
    for (const auto& [cv, mutex] : waiters) {
      std::lock_guard<std::mutex> guard(*mutex);
      cv->notify_all();
    }
  }

 private:
  using Waiter = std::pair<std::condition_variable*, std::mutex*>;

  mutable std::mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  mutable std::multiset<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::service::testing

#endif  // KVSERVE_SERVICE_TESTING_FAKE_CLOCK_H_
