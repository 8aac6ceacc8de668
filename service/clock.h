// A time source that can also wait on a condition variable until one of its times, so
// that code which waits for a time (SerialExecutor::PostAt) can run on a fake clock in
// tests (service/testing/fake_clock.h) instead of sleeping on the wall clock.
#ifndef KVSERVE_SERVICE_CLOCK_H_
#define KVSERVE_SERVICE_CLOCK_H_

#include <condition_variable>
#include <mutex>

#include "absl/time/time.h"

namespace kvserve::service {

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

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_CLOCK_H_
