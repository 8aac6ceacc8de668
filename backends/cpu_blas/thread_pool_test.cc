#include "backends/cpu_blas/thread_pool.h"

#include <atomic>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::backends::cpu_blas {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n_tasks : {0, 1, 2, 7, 100}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n_tasks));
      std::atomic<bool> bad_thread{false};
      pool.Run(n_tasks, [&](int64_t task, int thread) {
        runs[static_cast<size_t>(task)].fetch_add(1);
        if (thread < 0 || thread >= threads) bad_thread = true;
      });
      for (int64_t t = 0; t < n_tasks; ++t) EXPECT_EQ(runs[t].load(), 1) << "task " << t;
      EXPECT_FALSE(bad_thread.load());
    }
  }
}

// Many short loops back to back (the pattern of a decode step); results written by
// workers are visible to the caller when Run returns.
// RunRanges covers [0, n) exactly once, in at most 4 ranges per thread.
TEST(ThreadPoolTest, RunRangesCoversEveryIndexOnce) {
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (int n : {0, 1, 5, 12, 13, 100}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> ranges{0};
      pool.RunRanges(n, [&](int begin, int end) {
        EXPECT_LT(begin, end);
        ranges.fetch_add(1);
        for (int i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
      EXPECT_LE(ranges.load(), 4 * threads) << "n " << n;
    }
  }
}

TEST(ThreadPoolTest, ManyShortLoopsPublishTheirResults) {
  ThreadPool pool(3);
  std::vector<int64_t> out(64);
  for (int iteration = 0; iteration < 2000; ++iteration) {
    pool.Run(static_cast<int64_t>(out.size()), [&](int64_t task, int /*thread*/) {
      out[static_cast<size_t>(task)] = task + iteration;
    });
    for (size_t t = 0; t < out.size(); ++t) {
      ASSERT_EQ(out[t], static_cast<int64_t>(t) + iteration);
    }
  }
}

// Per-thread scratch is safe: two tasks with the same thread index never overlap.
TEST(ThreadPoolTest, ThreadIndexIsExclusive) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> inside(4);
  std::atomic<bool> overlap{false};
  for (int iteration = 0; iteration < 200; ++iteration) {
    pool.Run(64, [&](int64_t /*task*/, int thread) {
      if (inside[thread].fetch_add(1) != 0) overlap = true;
      volatile int spin = 0;
      for (int i = 0; i < 100; ++i) spin = spin + i;
      inside[thread].fetch_sub(1);
    });
  }
  EXPECT_FALSE(overlap.load());
}

}  // namespace
}  // namespace kvserve::backends::cpu_blas
