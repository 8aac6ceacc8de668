// The one time source of kvserve's engine and service: Now(), and a wait on a condition
// variable until one of its times, so that code which reads or waits for time (request
// deadlines, session expiry, usage times, SerialExecutor::PostAt) runs on a fake clock in
// tests (common/testing/fake_clock.h) instead of sleeping on the wall clock.
#ifndef KVSERVE_COMMON_CLOCK_H_
#define KVSERVE_COMMON_CLOCK_H_

#include <condition_variable>
#include <mutex>

#include "absl/time/time.h"

namespace kvserve::common {

// Threading: implementations are thread-safe.
class Clock {
 public:
  // The wall clock (absl::Now). Never null, lives forever, stateless.
  static const Clock* Real();

  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;
  // With `lock` held on `cv`'s mutex: releases it and blocks until `cv` is notified or
  // Now() reaches `deadline`, then holds it again. May return early (spurious wake-up),
  // so callers check their condition and Now() again in a loop.
  virtual void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                         absl::Time deadline) const = 0;
};

}  // namespace kvserve::common

#endif  // KVSERVE_COMMON_CLOCK_H_
