#include "common/heap_tuning.h"

#include <cstdio>
#include <cstdlib>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kvserve::common {
namespace {

TEST(HeapTuningTest, RejectsANegativeArenaCount) {
  HeapTuningOptions options;
  options.arena_max = -1;
  EXPECT_FALSE(TuneHeapForLargeBuffers(options));
}

#if defined(__GLIBC__)
// The arenas malloc_info reports (one <heap nr="..."> element each).
int Arenas() {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  if (out == nullptr) return -1;
  malloc_info(0, out);
  std::fclose(out);
  const std::string info(text, size);
  std::free(text);
  int arenas = 0;
  for (size_t at = info.find("<heap nr="); at != std::string::npos;
       at = info.find("<heap nr=", at + 1)) {
    ++arenas;
  }
  return arenas;
}

// With the default options, 8 threads allocating at once share at most 2 arenas (glibc
// alone would give each its own, up to 8 per core).
TEST(HeapTuningTest, EightThreadsShareTwoArenas) {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::string(tunables).find("arena_max") != std::string::npos) {
    GTEST_SKIP() << "GLIBC_TUNABLES sets arena_max, which takes precedence";
  }
  ASSERT_TRUE(TuneHeapForLargeBuffers());
  constexpr int kThreads = 8;
  std::latch allocated(kThreads);
  std::latch counted(1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::vector<char> buffer(size_t{1} << 20, 1);  // held until counted
      allocated.count_down();
      counted.wait();
    });
  }
  allocated.wait();
  const int arenas = Arenas();
  counted.count_down();
  for (std::thread& t : threads) t.join();
  EXPECT_GE(arenas, 1);
  EXPECT_LE(arenas, 2);
}
#endif

}  // namespace
}  // namespace kvserve::common
