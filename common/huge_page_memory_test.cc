#include "common/huge_page_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::common {
namespace {

TEST(HugePageMemoryTest, IsAlignedZeroFilledAndWritable) {
  auto m = HugePageMemory::Allocate(3 * HugePageMemory::kHugePageBytes + 5);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m->data()) % HugePageMemory::kHugePageBytes, 0u);
  EXPECT_EQ(m->size(), 4 * HugePageMemory::kHugePageBytes);
  for (size_t i = 0; i < m->size(); i += 4096) EXPECT_EQ(m->data()[i], 0) << i;
  m->data()[m->size() - 1] = 42;
  EXPECT_EQ(m->data()[m->size() - 1], 42);
}

TEST(HugePageMemoryTest, MovesOwnership) {
  auto m = HugePageMemory::Allocate(100);
  ASSERT_TRUE(m.ok());
  uint8_t* data = m->data();
  HugePageMemory moved = std::move(*m);
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(m->data(), nullptr);
  HugePageMemory assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.data(), data);
  assigned.data()[99] = 1;
}

// Pages of `m` resident now (mincore).
size_t ResidentPages(const HugePageMemory& m) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((m.size() + page - 1) / page);
  if (mincore(m.data(), m.size(), vec.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

// Without populate the region is not resident until touched; with it, all of it is.
TEST(HugePageMemoryTest, PopulateMakesTheWholeRegionResident) {
  const size_t bytes = 8 * HugePageMemory::kHugePageBytes;
  const size_t pages = bytes / static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto lazy = HugePageMemory::Allocate(bytes);
  ASSERT_TRUE(lazy.ok());
  EXPECT_LT(ResidentPages(*lazy), pages);
  auto eager = HugePageMemory::Allocate(bytes, /*populate=*/true);
  ASSERT_TRUE(eager.ok());
  EXPECT_EQ(ResidentPages(*eager), pages);
  for (size_t i = 0; i < eager->size(); i += 4096) ASSERT_EQ(eager->data()[i], 0) << i;
}

TEST(HugePageMemoryTest, RejectsZeroAndAbsurdSizes) {
  EXPECT_EQ(HugePageMemory::Allocate(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HugePageMemory::Allocate(size_t{1} << 60).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::common
