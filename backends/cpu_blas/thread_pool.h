// A small fixed pool of worker threads for data-parallel loops inside one Forward step.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_THREAD_POOL_H_
#define KVSERVE_BACKENDS_CPU_BLAS_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvserve::backends::cpu_blas {

// Runs `n_tasks` independent tasks on the calling thread plus size() - 1 workers, and
// returns when all are done. Tasks are claimed dynamically, so uneven tasks balance.
// Workers poll briefly after a loop before they sleep: a step runs many short loops back
// to back, and waking a sleeping thread costs tens of microseconds.
//
// Run waits for the tasks, not for the workers: a worker that the OS has not scheduled
// yet simply claims nothing, so a busy machine delays a loop by no more than its tasks.
//
// Invariants: `state_` holds (loop epoch << 32 | next task index). A task index is claimed
// by a compare-and-swap of that word, so a claim succeeds only while its loop is current;
// the loop's descriptor (loops_[epoch & 1]) stays unchanged while any task of it is
// unfinished, because the next-but-one loop cannot start before this one completes.
// Threading: Run() must be called from one thread at a time (the owner's, e.g. the
// engine's step thread); it is not reentrant (a task must not call Run).
class ThreadPool {
 public:
  // `threads` >= 1 counts the calling thread: ThreadPool(1) runs everything inline.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task, thread) once for each task in [0, n_tasks); `thread` in [0, size())
  // identifies the executing thread (0 = the caller), so tasks can use per-thread scratch.
  // Two tasks with the same `thread` never run at the same time. Precondition:
  // n_tasks < 2^32.
  void Run(int64_t n_tasks, const std::function<void(int64_t task, int thread)>& fn);

  // Calls fn(begin, end) over [0, n) split into at most 4 ranges per thread of equal
  // length (the last may be shorter), as tasks of one Run. For elementwise work on rows.
  void RunRanges(int n, const std::function<void(int begin, int end)>& fn);

 private:
  struct Loop {
    std::atomic<const std::function<void(int64_t, int)>*> fn{nullptr};
    std::atomic<int64_t> n_tasks{0};
    std::atomic<int64_t> unfinished{0};  // tasks claimed or not, not yet completed
  };

  void WorkerLoop(int thread);
  // Claims and runs tasks of loop `epoch` until none are left or the loop changed.
  void Drain(uint64_t epoch, int thread);

  std::vector<std::thread> workers_;
  std::atomic<uint64_t> state_{0};
  Loop loops_[2];

  std::mutex mu_;
  std::condition_variable work_cv_;  // a new loop was published, or stop_
  std::condition_variable done_cv_;  // a loop's last task completed
  bool stop_ = false;                // guarded by mu_
};

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_THREAD_POOL_H_
