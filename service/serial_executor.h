// A serial executor: one thread that runs posted tasks one at a time, in order.
//
// Order: Post() tasks run in submission order. A PostAt() task becomes due when the
// clock reaches its time; due tasks then run after the tasks already posted, in time
// order (equal times in submission order). Tasks may post further tasks (from inside a
// task too); none runs concurrently with another.
//
// Shutdown: the destructor drains: it runs every task still queued, timed ones at once
// whatever their time (in time order, after the untimed ones), including tasks that
// those tasks post, then joins the thread. Posting from another thread once the
// destructor has started is not allowed.
//
// Threading: Post/PostAt are thread-safe and never block for long (a mutex and a
// notify), so the engine's step thread may call them.
#ifndef KVSERVE_SERVICE_SERIAL_EXECUTOR_H_
#define KVSERVE_SERVICE_SERIAL_EXECUTOR_H_

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace kvserve::service {

class SerialExecutor {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  // `clock` (the time of PostAt) must outlive the executor.
  explicit SerialExecutor(const common::Clock* clock = common::Clock::Real());
  // Runs every queued task (see Shutdown above), then joins the thread.
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // Runs `task` on the executor's thread, after the tasks posted before it.
  void Post(Task task);
  // Runs `task` on the executor's thread once the clock reaches `when` (at once when it
  // already has).
  void PostAt(absl::Time when, Task task);

 private:
  void Loop();

  const common::Clock* const clock_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> ready_ ABSL_GUARDED_BY(mu_);
  // Tasks waiting for their time (a multimap keeps equal times in insertion order).
  std::multimap<absl::Time, Task> timed_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Last member: started after everything it uses, joined in the destructor.
  std::thread thread_;
};

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_SERIAL_EXECUTOR_H_
