#include "backends/cpu_blas/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvserve::backends::cpu_blas {
namespace {

// About 20-50 microseconds of polling before a thread blocks.
constexpr int kSpinIterations = 20000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

inline uint64_t EpochOf(uint64_t state) { return state >> 32; }
inline int64_t IndexOf(uint64_t state) { return static_cast<int64_t>(state & 0xffffffffu); }

}  // namespace

ThreadPool::ThreadPool(int threads) {
  const int n = threads < 1 ? 0 : threads - 1;
  workers_.reserve(n);
  for (int i = 0; i < n; ++i) workers_.emplace_back([this, i] { WorkerLoop(i + 1); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Drain(uint64_t epoch, int thread) {
  Loop& loop = loops_[epoch & 1];
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (EpochOf(s) != epoch) return;
    // Acquire loads: if they see a newer loop's descriptor, the CAS below sees the newer
    // epoch and fails, so a stale read is never acted on.
    const int64_t n_tasks = loop.n_tasks.load(std::memory_order_acquire);
    const std::function<void(int64_t, int)>* fn = loop.fn.load(std::memory_order_acquire);
    const int64_t task = IndexOf(s);
    if (task >= n_tasks) return;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // s was reloaded
    }
    (*fn)(task, thread);
    if (loop.unfinished.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_all();
    }
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::RunRanges(int n, const std::function<void(int, int)>& fn) {
  if (n <= 0) return;
  const int chunks = std::min(n, size() * 4);
  const int per_chunk = (n + chunks - 1) / chunks;
  Run((n + per_chunk - 1) / per_chunk, [&](int64_t task, int /*thread*/) {
    const int begin = static_cast<int>(task) * per_chunk;
    fn(begin, std::min(n, begin + per_chunk));
  });
}

void ThreadPool::Run(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
  if (n_tasks <= 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  const uint64_t epoch = EpochOf(state_.load(std::memory_order_relaxed)) + 1;
  Loop& loop = loops_[epoch & 1];
  loop.fn.store(&fn, std::memory_order_release);
  loop.n_tasks.store(n_tasks, std::memory_order_release);
  loop.unfinished.store(n_tasks, std::memory_order_release);
  {
    // Under the mutex, so a worker that checked state_ and is about to wait cannot miss
    // the notification.
    std::lock_guard<std::mutex> lock(mu_);
    state_.store(epoch << 32, std::memory_order_release);
  }
  work_cv_.notify_all();
  Drain(epoch, 0);
  for (int i = 0; i < kSpinIterations; ++i) {
    if (loop.unfinished.load(std::memory_order_acquire) == 0) return;
    CpuRelax();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return loop.unfinished.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t epoch = EpochOf(state_.load(std::memory_order_acquire));
    for (int i = 0; epoch == seen && i < kSpinIterations; ++i) {
      CpuRelax();
      epoch = EpochOf(state_.load(std::memory_order_acquire));
    }
    if (epoch == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(
          lock, [&] { return stop_ || EpochOf(state_.load(std::memory_order_acquire)) != seen; });
      if (stop_) return;
      epoch = EpochOf(state_.load(std::memory_order_acquire));
    }
    seen = epoch;
    Drain(epoch, thread);
  }
}

}  // namespace kvserve::backends::cpu_blas
