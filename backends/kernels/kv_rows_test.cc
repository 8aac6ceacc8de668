#include "backends/kernels/kv_rows.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "backends/kv_arena.h"
#include "gtest/gtest.h"
#include "model/dtype.h"

namespace kvserve::backends::kernels {
namespace {

using model::DType;
using model::KvLayout;

// A value unique to (layer, kind, pos, i) for layer < 3, pos < 8, i < 5, exactly
// representable in f16 (at most 300 / 8, in steps of 1/8).
float Tag(int layer, int kind, int pos, int i) {
  return static_cast<float>(layer * 100 + kind * 50 + pos * 5 + i) / 8.0f;
}

TEST(SequenceKvTest, RowFollowsLayout) {
  const KvLayout layout{2, 6, 4, DType::kF32};
  KvArena arena(layout);
  const auto blocks = arena.Allocate(10);
  ASSERT_EQ(blocks.size(), 3u);
  const SequenceKv kv(layout, blocks);
  EXPECT_EQ(kv.capacity_tokens(), 12);
  EXPECT_EQ(kv.Row(0, KvKind::kKey, 0), blocks[0]);
  EXPECT_EQ(kv.Row(1, KvKind::kValue, 9), blocks[2] + layout.offset(1, 1, 1));
  EXPECT_EQ(kv.Row(0, KvKind::kValue, 4), blocks[1] + layout.offset(0, 1, 0));
}

class SequenceKvDtypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(SequenceKvDtypeTest, EveryRowRoundTripsWithoutOverlap) {
  const KvLayout layout{3, 5, 3, GetParam()};
  KvArena arena(layout);
  const SequenceKv kv(layout, arena.Allocate(8));
  std::vector<float> row(5);
  for (int l = 0; l < 3; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int p = 0; p < 8; ++p) {
        for (int i = 0; i < 5; ++i) row[i] = Tag(l, kind, p, i);
        kv.Write(l, static_cast<KvKind>(kind), p, row);
      }
    }
  }
  for (int l = 0; l < 3; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int p = 0; p < 8; ++p) {
        kv.Read(l, static_cast<KvKind>(kind), p, row);
        for (int i = 0; i < 5; ++i) EXPECT_EQ(row[i], Tag(l, kind, p, i));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SequenceKvDtypeTest, ::testing::Values(DType::kF32, DType::kF16));

TEST(SequenceKvTest, F16RoundsToNearestHalf) {
  const KvLayout layout{1, 2, 4, DType::kF16};
  KvArena arena(layout);
  const SequenceKv kv(layout, arena.Allocate(1));
  const std::vector<float> row = {0.1f, -3.14159f};
  kv.Write(0, KvKind::kKey, 0, row);
  std::vector<float> out(2);
  kv.Read(0, KvKind::kKey, 0, out);
  EXPECT_EQ(out[0], model::HalfToFloat(model::FloatToHalf(0.1f)));
  EXPECT_EQ(out[1], model::HalfToFloat(model::FloatToHalf(-3.14159f)));
  EXPECT_NE(out[0], 0.1f);
  EXPECT_NEAR(out[0], 0.1f, 1e-4);
}

TEST(SequenceKvTest, SliceDotAndAxpy) {
  const KvLayout layout{1, 4, 2, DType::kF32};
  KvArena arena(layout);
  const SequenceKv kv(layout, arena.Allocate(3));
  kv.Write(0, KvKind::kKey, 2, std::vector<float>{1, 2, 3, 4});
  kv.Write(0, KvKind::kValue, 2, std::vector<float>{5, 6, 7, 8});
  EXPECT_EQ(kv.DotSlice(0, KvKind::kKey, 2, 2, std::vector<float>{10, -1}), 26.0f);
  std::vector<float> acc = {1, 1};
  kv.AxpySlice(0, KvKind::kValue, 2, 2, 0.5f, acc);
  EXPECT_EQ(acc, (std::vector<float>{4.5f, 5.0f}));
}

TEST(KvArenaTest, BlocksAreZeroedAlignedAndDistinct) {
  const KvLayout layout{2, 3, 5, DType::kF16};
  KvArena arena(layout);
  const auto a = arena.Allocate(11);  // 3 blocks
  const auto b = arena.Allocate(5);   // 1 block
  const auto c = arena.Allocate(0);   // none
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(b.size(), 1u);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(arena.block_count(), 4);
  for (auto blocks : {a, b}) {
    for (uint8_t* block : blocks) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % 64, 0u);
      for (size_t i = 0; i < layout.block_bytes(); ++i) ASSERT_EQ(block[i], 0);
    }
  }
  EXPECT_NE(a[0], b[0]);
  // Spans stay valid while more sequences are allocated.
  uint8_t* first = a[0];
  for (int i = 0; i < 50; ++i) arena.Allocate(20);
  EXPECT_EQ(a[0], first);
  a[2][layout.block_bytes() - 1] = 7;  // whole block is writable (ASan checks)
}

TEST(KvArenaTest, NothingForNegativeCapacityOrInvalidLayout) {
  KvArena arena(KvLayout{2, 3, 5, DType::kF16});
  EXPECT_TRUE(arena.Allocate(-5).empty());
  KvArena bad(KvLayout{2, 3, /*block_tokens=*/0, DType::kF16});  // divided by zero before
  EXPECT_TRUE(bad.Allocate(10).empty());
  EXPECT_EQ(bad.block_count(), 0);
}

// Pages of [begin, end) resident now (mincore; begin is rounded down to a page).
size_t ResidentPages(const uint8_t* begin, const uint8_t* end) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(begin) / page * page;
  const size_t bytes = static_cast<size_t>(reinterpret_cast<uintptr_t>(end) - first);
  std::vector<unsigned char> vec((bytes + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(first), bytes, vec.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

// A sequence of 2 MiB or more lives in one huge-page region: resident from the start
// with populate (as benchmarks ask, like kvserve's --kv_prefault pool), touched as used
// without. Every block is zero-filled either way.
TEST(KvArenaTest, PopulateMakesLargeSequencesResident) {
  const KvLayout layout{8, 1024, 16, DType::kF32};  // blocks of 1 MiB
  ASSERT_EQ(layout.block_bytes(), size_t{1} << 20);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (bool populate : {false, true}) {
    SCOPED_TRACE(populate ? "populate" : "lazy");
    KvArena arena(layout, populate);
    const auto blocks = arena.Allocate(16 * 8);  // 8 blocks, 8 MiB
    ASSERT_EQ(blocks.size(), 8u);
    const uint8_t* end = blocks.back() + layout.block_bytes();
    const size_t pages = static_cast<size_t>(end - blocks.front() + page - 1) / page;
    if (populate) {
      EXPECT_EQ(ResidentPages(blocks.front(), end), pages);
    } else {
      EXPECT_LT(ResidentPages(blocks.front(), end), pages);
    }
    for (uint8_t* b : blocks) {
      for (size_t i = 0; i < layout.block_bytes(); i += page) ASSERT_EQ(b[i], 0);
    }
  }
}

}  // namespace
}  // namespace kvserve::backends::kernels
