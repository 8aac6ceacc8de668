#include "common/clock.h"

#include "absl/time/clock.h"

namespace kvserve::common {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 absl::Time deadline) const override {
    if (deadline == absl::InfiniteFuture()) {
      cv.wait(lock);
    } else {
      cv.wait_until(lock, absl::ToChronoTime(deadline));
    }
  }
};

}  // namespace

const Clock* Clock::Real() {
  static const RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace kvserve::common
