#include "common/huge_page_memory.h"

#include <utility>

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

TEST(HugePageMemoryTest, RejectsZeroAndAbsurdSizes) {
  EXPECT_EQ(HugePageMemory::Allocate(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HugePageMemory::Allocate(size_t{1} << 60).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::common
