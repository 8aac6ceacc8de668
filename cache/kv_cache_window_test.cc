// Local attention in the KV cache manager: a sequence gives back the blocks before its
// window as it grows (bounded memory over a sequence 8x the window), prefix lookup reuses
// cached blocks wherever the window of the resume point is cached, and sessions pin only
// the window.
#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "gtest/gtest.h"

namespace kvserve::cache {
namespace {

constexpr int kBlockTokens = 4;
constexpr int kWindow = 8;

std::unique_ptr<KvCacheManager> MakeManager(int blocks, int window) {
  KvCacheManager::Options o;
  o.layout = model::KvLayout{1, 4, kBlockTokens, model::DType::kF16};
  o.budget_bytes = static_cast<size_t>(blocks) * o.layout.block_bytes();
  o.model_fingerprint = 7;
  o.sliding_window_tokens = window;
  auto m = KvCacheManager::Create(o);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

std::vector<int32_t> Iota(int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Grows open sequence `id` from `from` to tokens.size() positions, `step` at a time, as
// the engine does (reserve, compute, commit). Returns the most blocks the pool had in use,
// or -1 when a Reserve failed.
int GrowSequence(KvCacheManager& m, SequenceId id, const std::vector<int32_t>& tokens, int from,
                 int step) {
  int max_used = 0;
  const int n = static_cast<int>(tokens.size());
  for (int done = from; done < n;) {
    const int next = std::min(n, done + step);
    if (!m.Reserve(id, next)) return -1;
    max_used = std::max(max_used, m.pool().num_used());
    m.Commit(id, tokens, next);
    done = next;
  }
  return max_used;
}

// Opens sequence `id` over `tokens` with nothing cached and grows it to the end.
int OpenAndGrow(KvCacheManager& m, SequenceId id, const std::vector<int32_t>& tokens, int step) {
  EXPECT_EQ(m.Open(id, m.RootHash(""), tokens, 0), 0);
  return GrowSequence(m, id, tokens, 0, step);
}

TEST(KvCacheWindowTest, MemoryStaysBoundedOverASequenceEightTimesTheWindow) {
  // A pool of 6 blocks (24 positions) serves a 64-position sequence one token at a time:
  // at most the window's blocks plus the one being written are held.
  const std::vector<int32_t> tokens = Iota(8 * kWindow);
  auto m = MakeManager(6, kWindow);
  const int max_used = OpenAndGrow(*m, 1, tokens, 1);
  EXPECT_GE(max_used, kWindow / kBlockTokens);
  EXPECT_LE(max_used, kWindow / kBlockTokens + 2);  // O(W), not O(length)
  const std::span<uint8_t* const> pointers = m->BlockPointers(1);
  ASSERT_EQ(pointers.size(), 16u);
  EXPECT_EQ(pointers[0], nullptr);   // given back
  EXPECT_EQ(pointers[13], nullptr);  // positions 52..55: before the window of 64 (57..63)
  EXPECT_NE(pointers[14], nullptr);
  EXPECT_NE(pointers[15], nullptr);
  m->Close(1);
  EXPECT_EQ(m->pool().num_used(), 0);

  // Without a window the same pool runs out.
  auto full = MakeManager(6, 0);
  EXPECT_EQ(OpenAndGrow(*full, 1, tokens, 1), -1);
}

TEST(KvCacheWindowTest, SequenceCapacityIsUnboundedWhenWindowAndStepFit) {
  // Window 8 + step 8: 15 positions = 4 blocks, plus 2 partial ones.
  EXPECT_EQ(MakeManager(6, kWindow)->SequenceCapacityTokens(8),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(MakeManager(5, kWindow)->SequenceCapacityTokens(8), 20);
  EXPECT_EQ(MakeManager(16, 0)->SequenceCapacityTokens(8), 64);
}

TEST(KvCacheWindowTest, PrefillChunksKeepOnlyTheWindowBetweenSteps) {
  const std::vector<int32_t> tokens = Iota(8 * kWindow);
  auto m = MakeManager(8, kWindow);
  // Chunks of 8: each step holds its chunk's blocks plus the window before it.
  const int max_used = OpenAndGrow(*m, 1, tokens, 8);
  EXPECT_GT(max_used, 0);
  EXPECT_LE(max_used, (kWindow + 8) / kBlockTokens + 1);
}

TEST(KvCacheWindowTest, PrefixReuseNeedsOnlyTheWindowOfTheResumePoint) {
  // 8 blocks; sequence A of 40 positions (10 blocks) fits only thanks to the window.
  auto m = MakeManager(8, kWindow);
  const BlockHash root = m->RootHash("");
  const std::vector<int32_t> a = Iota(40);
  ASSERT_GE(OpenAndGrow(*m, 1, a, 4), 0);
  m->Close(1);
  // Another sequence takes 4 blocks: the least recently released ones, A's early blocks,
  // are evicted.
  const std::vector<int32_t> other(16, 999);
  m->Open(2, root, other, 0);
  ASSERT_TRUE(m->Reserve(2, 16));
  m->Close(2);

  // B continues A. A's first block is gone, so no prefix from the root is cached...
  std::vector<int32_t> b = a;
  for (int i = 0; i < 4; ++i) b.push_back(500 + i);
  EXPECT_EQ(m->CachedPrefixBlocks(root, b, m->ChainHashes(root, b, 10)), 0);
  // ...but resuming at 40 reads only positions 33..39 (blocks 8 and 9), which are cached.
  const int32_t cached = m->Open(4, root, b, 43);
  EXPECT_EQ(cached, 40);
  const std::span<uint8_t* const> pointers = m->BlockPointers(4);
  ASSERT_EQ(pointers.size(), 10u);
  EXPECT_EQ(pointers[7], nullptr);
  EXPECT_NE(pointers[8], nullptr);
  EXPECT_NE(pointers[9], nullptr);
  EXPECT_EQ(m->pool().num_used(), 2);
  // B grows on from there.
  EXPECT_GE(GrowSequence(*m, 4, b, cached, 1), 0);
  m->Close(4);
}

TEST(KvCacheWindowTest, ADifferingBlockLimitsReuseToBeforeIt) {
  auto m = MakeManager(16, kWindow);  // nothing is evicted
  const BlockHash root = m->RootHash("");
  const std::vector<int32_t> a = Iota(40);
  ASSERT_GE(OpenAndGrow(*m, 1, a, 4), 0);
  m->Close(1);
  std::vector<int32_t> b = Iota(44);
  b[38] = 777;  // block 9 differs
  EXPECT_EQ(m->Open(2, root, b, 43), 36);
  const std::span<uint8_t* const> pointers = m->BlockPointers(2);
  ASSERT_EQ(pointers.size(), 9u);
  EXPECT_EQ(pointers[6], nullptr);  // resuming at 36 reads positions 29..35: blocks 7, 8
  EXPECT_NE(pointers[7], nullptr);
  EXPECT_EQ(m->pool().num_used(), 2);
  EXPECT_EQ(m->stats().prefix_hits_total, 9);
  m->Close(2);
}

TEST(KvCacheWindowTest, SessionsPinOnlyTheWindow) {
  auto m = MakeManager(16, kWindow);
  const BlockHash root = m->RootHash("");
  const std::vector<int32_t> a = Iota(40);
  ASSERT_GE(OpenAndGrow(*m, 1, a, 1), 0);
  m->PinSession("s", 1, a);
  m->Close(1);
  EXPECT_EQ(m->session_blocks("s"), 2);  // blocks 8 and 9: what resuming at 40 reads
  EXPECT_EQ(m->pool().num_used(), 2);
  std::vector<int32_t> next = a;
  next.push_back(41);
  EXPECT_EQ(m->Open(2, root, next, 40), 40);
  m->Close(2);
  m->ReleaseSession("s");
  EXPECT_EQ(m->pool().num_used(), 0);
}

}  // namespace
}  // namespace kvserve::cache
