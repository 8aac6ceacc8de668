#include "common/heap_tuning.h"

#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::common {
namespace {

TEST(HeapTuningTest, RejectsANegativeArenaCount) {
  HeapTuningOptions options;
  options.arena_max = -1;
  EXPECT_FALSE(TuneHeapForLargeBuffers(options));
}

#if defined(__GLIBC__)
// glibc takes every default value, with or without an arena count of the user's.
TEST(HeapTuningTest, GlibcTakesTheDefaults) {
  EXPECT_TRUE(TuneHeapForLargeBuffers());
  ASSERT_EQ(setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=3", 1), 0);
  EXPECT_TRUE(TuneHeapForLargeBuffers());
  ASSERT_EQ(unsetenv("GLIBC_TUNABLES"), 0);
  // Large buffers still allocate and free normally.
  std::vector<char> big(size_t{8} << 20, 1);
  EXPECT_EQ(big.back(), 1);
}
#endif

}  // namespace
}  // namespace kvserve::common
