// A manual Clock for tests: time moves only when the test calls Advance (or by a fixed
// tick per reading), and waiters (SerialExecutor's thread) are woken when it does.
// Test-only.
//
// Threading: every method is thread-safe. Objects waiting on this clock must not be
// destroyed while an Advance runs (tests advance and destroy from one thread).
#ifndef KVSERVE_COMMON_TESTING_FAKE_CLOCK_H_
#define KVSERVE_COMMON_TESTING_FAKE_CLOCK_H_

#include <condition_variable>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace kvserve::common::testing {

class FakeClock final : public Clock {
 public:
  // Starts at `start`; every Now() after the first moves the time by `tick` (zero: the
  // time moves only with Advance).
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'000'000),
                     absl::Duration tick = absl::ZeroDuration())
      : now_(start), tick_(tick) {}

  absl::Time Now() const override {
    std::lock_guard<std::mutex> guard(mu_);
    const absl::Time t = now_;
    now_ += tick_;
    return t;
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
  mutable absl::Time now_ ABSL_GUARDED_BY(mu_);
  const absl::Duration tick_;
  mutable std::multiset<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::common::testing

#endif  // KVSERVE_COMMON_TESTING_FAKE_CLOCK_H_
