#include "cache/kv_cache_manager.h"

#include <cstring>
#include <numeric>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::cache {
namespace {

constexpr int kBlockTokens = 4;

std::unique_ptr<KvCacheManager> MakeManager(int blocks, uint64_t fingerprint = 7) {
  KvCacheManager::Options o;
  o.layout = model::KvLayout{1, 4, kBlockTokens, model::DType::kF16};
  o.budget_bytes = static_cast<size_t>(blocks) * o.layout.block_bytes();
  o.model_fingerprint = fingerprint;
  auto m = KvCacheManager::Create(o);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

std::vector<int32_t> Iota(int n, int32_t start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Imports `payloads` as blocks first.. of `chain` as the engine does: reserve, write
// (another thread in the engine), finish. Returns the blocks cached afterwards.
int32_t Import(KvCacheManager& m, uint64_t key, const BlockHash& root,
               std::span<const int32_t> tokens, std::span<const BlockHash> chain, int32_t first,
               std::span<const std::span<const uint8_t>> payloads) {
  const std::vector<uint8_t*> to =
      m.ReserveImport(key, root, tokens, chain, first, static_cast<int32_t>(payloads.size()));
  for (size_t i = 0; i < to.size(); ++i) std::memcpy(to[i], payloads[i].data(), payloads[i].size());
  return m.FinishImport(key, tokens, static_cast<int32_t>(to.size()));
}

// Runs a sequence through the manager as the engine would: open, reserve, "compute",
// commit, close. Returns the cached positions found at open.
int32_t RunSequence(KvCacheManager& m, SequenceId id, const BlockHash& root,
                    const std::vector<int32_t>& tokens) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  const int32_t cached = m.Open(id, root, tokens, n - 1);
  EXPECT_TRUE(m.Reserve(id, n));
  EXPECT_EQ(m.BlockPointers(id).size(), static_cast<size_t>(m.BlocksFor(n)));
  m.Commit(id, tokens, n);
  m.Close(id);
  return cached;
}

TEST(KvCacheManagerTest, FindsLongestCachedPrefixOfFullBlocks) {
  auto m = MakeManager(16);
  const BlockHash root = m->RootHash("");
  const auto a = Iota(10);  // blocks [0..3] [4..7] + partial [8, 9]
  EXPECT_EQ(RunSequence(*m, 1, root, a), 0);
  EXPECT_EQ(m->stats().blocks_cached, 2);
  EXPECT_EQ(m->stats().blocks_used, 0);
  // Same first block, different second block.
  auto b = Iota(13);
  b[6] = 100;
  EXPECT_EQ(RunSequence(*m, 2, root, b), 4);
  // An exact repeat is capped at n - 1 positions: the last full block is recomputed
  // when the whole prompt is block aligned.
  const auto c = Iota(8);
  EXPECT_EQ(RunSequence(*m, 3, root, c), 4);
  const auto d = Iota(9);
  EXPECT_EQ(RunSequence(*m, 4, root, d), 8);
  const KvCacheStats s = m->stats();
  EXPECT_EQ(s.prefix_queries_total, 2 + 3 + 1 + 2);
  EXPECT_EQ(s.prefix_hits_total, 0 + 1 + 1 + 2);
}

TEST(KvCacheManagerTest, SaltsAndModelsNeverShare) {
  auto m = MakeManager(16, /*fingerprint=*/7);
  const auto t = Iota(12);
  EXPECT_EQ(RunSequence(*m, 1, m->RootHash("tenant-a"), t), 0);
  EXPECT_EQ(RunSequence(*m, 2, m->RootHash("tenant-b"), t), 0);
  EXPECT_EQ(RunSequence(*m, 3, m->RootHash(""), t), 0);
  EXPECT_EQ(RunSequence(*m, 4, m->RootHash("tenant-a"), t), 8);
  // Another model's root never matches this one's blocks.
  EXPECT_EQ(RunSequence(*m, 5, RootBlockHash(KvIdentity{8, 0, m->layout()}, "tenant-a"), t), 0);
}

TEST(KvCacheManagerTest, ReserveFailsCleanlyAndCloseReturnsEveryBlock) {
  auto m = MakeManager(4);
  const BlockHash root = m->RootHash("");
  const auto t = Iota(20);
  m->Open(1, root, t, 19);
  EXPECT_TRUE(m->Reserve(1, 12));
  EXPECT_EQ(m->BlocksToReserve(1, 20), 2);
  EXPECT_FALSE(m->Reserve(1, 20));  // needs 5 blocks of 4
  EXPECT_EQ(m->BlockPointers(1).size(), 3u);
  m->Commit(1, t, 12);
  EXPECT_EQ(m->committed_blocks(1), 3);
  m->Close(1);
  const KvCacheStats s = m->stats();
  EXPECT_EQ(s.blocks_used, 0);
  EXPECT_EQ(s.blocks_cached + s.blocks_free, s.blocks_total);
}

TEST(KvCacheManagerTest, SessionBlocksSurvivePressureThatOtherBlocksCanMeet) {
  auto m = MakeManager(4);
  const BlockHash root = m->RootHash("");
  const auto t = Iota(9);
  m->Open(1, root, t, 8);
  ASSERT_TRUE(m->Reserve(1, 9));
  m->Commit(1, t, 9);
  m->PinSession("s", 1, t);
  EXPECT_EQ(m->session_blocks("s"), 2);
  m->Close(1);
  EXPECT_EQ(m->stats().blocks_used, 2);
  EXPECT_EQ(m->stats().session_blocks, 2);
  // Another sequence fills the other two blocks, then releases them: the session's
  // blocks were never candidates for eviction.
  const auto other = Iota(8, 500);
  m->Open(2, root, other, 7);
  ASSERT_TRUE(m->Reserve(2, 8));
  m->Close(2);
  EXPECT_EQ(m->stats().session_reclaims_total, 0);
  EXPECT_EQ(RunSequence(*m, 3, root, t), 8);
  m->ReleaseSession("s");
  EXPECT_EQ(m->stats().blocks_used, 0);
  EXPECT_EQ(m->stats().session_blocks, 0);
}

TEST(KvCacheManagerTest, ReserveReclaimsTheLeastRecentlyPinnedSession) {
  auto m = MakeManager(4);
  const BlockHash root = m->RootHash("");
  const auto a = Iota(9);
  const auto b = Iota(9, 100);
  for (auto [seq, tokens, name] : {std::tuple{1, &a, "old"}, std::tuple{2, &b, "new"}}) {
    m->Open(seq, root, *tokens, 8);
    ASSERT_TRUE(m->Reserve(seq, 8));
    m->Commit(seq, *tokens, 8);
    m->PinSession(name, seq, *tokens);
    m->Close(seq);
  }
  EXPECT_EQ(m->stats().blocks_used, 4);
  // Two blocks needed: "old" (pinned first) gives its two back, "new" keeps its own.
  const auto c = Iota(8, 200);
  m->Open(3, root, c, 7);
  ASSERT_TRUE(m->Reserve(3, 8));
  EXPECT_EQ(m->session_blocks("old"), 0);
  EXPECT_EQ(m->session_blocks("new"), 2);
  EXPECT_EQ(m->stats().session_reclaims_total, 1);
  // 32 tokens (8 blocks) exceed the 4-block pool: "new" is reclaimed too, in vain.
  EXPECT_FALSE(m->Reserve(3, 32));
  EXPECT_EQ(m->session_blocks("new"), 0);
  EXPECT_EQ(m->stats().session_reclaims_total, 2);
  m->Close(3);
  EXPECT_EQ(m->stats().blocks_used, 0);
}

TEST(KvCacheManagerTest, ForkHoldsTheParentsBlocksAndReleasesIndependently) {
  auto m = MakeManager(8);
  const BlockHash root = m->RootHash("");
  const auto t = Iota(8);
  m->Open(1, root, t, 7);
  ASSERT_TRUE(m->Reserve(1, 8));
  m->Commit(1, t, 8);
  m->PinSession("parent", 1, t);
  m->Close(1);
  m->ForkSession("parent", "child");
  EXPECT_EQ(m->session_blocks("child"), 2);
  EXPECT_EQ(m->stats().session_blocks, 4);
  EXPECT_EQ(m->stats().blocks_used, 2);  // shared: two references each
  m->ReleaseSession("parent");
  EXPECT_EQ(m->stats().blocks_used, 2);
  m->ForkSession("gone", "orphan");  // an unknown parent holds nothing
  EXPECT_EQ(m->session_blocks("orphan"), 0);
  m->ReleaseAllSessions();
  EXPECT_EQ(m->stats().blocks_used, 0);
  EXPECT_EQ(m->stats().session_blocks, 0);
}

TEST(KvCacheManagerTest, DuplicateComputationPinsTheCanonicalBlock) {
  auto m = MakeManager(8);
  const BlockHash root = m->RootHash("");
  const auto t = Iota(5);
  // Two sequences computed the same prefix concurrently (both missed at open).
  m->Open(1, root, t, 4);
  m->Open(2, root, t, 4);
  ASSERT_TRUE(m->Reserve(1, 5));
  ASSERT_TRUE(m->Reserve(2, 5));
  m->Commit(1, t, 5);
  m->Commit(2, t, 5);
  m->PinSession("s", 2, t);
  ASSERT_EQ(m->session_blocks("s"), 1);
  m->Close(1);
  m->Close(2);
  // Only the canonical (registered) block stays used; the duplicate went free.
  EXPECT_EQ(m->stats().blocks_used, 1);
  EXPECT_EQ(m->stats().blocks_cached, 0);
  m->ReleaseSession("s");
  EXPECT_EQ(m->stats().blocks_cached, 1);
}

// Exported blocks of one manager imported into another ("another replica") are found
// there as a cached prefix, with the same bytes.
TEST(KvCacheManagerTest, ExportedBlocksImportIntoAnotherManager) {
  auto a = MakeManager(8);
  auto b = MakeManager(8);
  const BlockHash root = a->RootHash("t");
  ASSERT_EQ(root, b->RootHash("t"));
  const auto tokens = Iota(13);  // 3 full blocks
  ASSERT_EQ(a->Open(1, root, tokens, 12), 0);
  ASSERT_TRUE(a->Reserve(1, 13));
  for (size_t i = 0; i < 3; ++i) {
    std::memset(a->BlockPointers(1)[i], static_cast<int>(10 + i), a->layout().block_bytes());
  }
  a->Commit(1, tokens, 13);
  const std::vector<KvCacheManager::ExportBlock> out = a->PinExport(77, 1, tokens);
  a->Close(1);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(a->export_blocks(), 3);
  EXPECT_EQ(a->stats().blocks_used, 3);  // the export holds them
  const std::vector<BlockHash> chain = a->ChainHashes(root, tokens, 3);
  EXPECT_EQ(out[0].parent, root);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(out[i].hash, chain[i]);
  EXPECT_EQ(a->CachedPrefixBlocks(root, tokens, chain), 3);

  EXPECT_EQ(b->CachedPrefixBlocks(root, tokens, chain), 0);
  // The first block is imported alone, then the rest after it.
  const size_t bytes = b->layout().block_bytes();
  std::vector<std::span<const uint8_t>> payloads;
  for (const auto& e : out) payloads.emplace_back(e.data, bytes);
  EXPECT_EQ(Import(*b, 5, root, tokens, chain, 0, std::span(payloads).first(1)), 1);
  EXPECT_EQ(Import(*b, 5, root, tokens, chain, 1, std::span(payloads).subspan(1)), 3);
  EXPECT_EQ(b->CachedPrefixBlocks(root, tokens, chain), 3);
  EXPECT_EQ(b->stats().blocks_used, 0);
  EXPECT_EQ(b->stats().blocks_cached, 3);
  ASSERT_EQ(b->Open(2, root, tokens, 12), 12);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(std::memcmp(b->BlockPointers(2)[i], out[i].data, bytes), 0) << i;
  }
  b->Close(2);
  a->ReleaseExport(77);
  EXPECT_EQ(a->export_blocks(), 0);
  EXPECT_EQ(a->stats().blocks_used, 0);
  // Importing after a gap is refused: block 0 of another salt is not cached.
  const BlockHash other = b->RootHash("u");
  const std::vector<BlockHash> other_chain = b->ChainHashes(other, tokens, 3);
  EXPECT_EQ(Import(*b, 6, other, tokens, other_chain, 1, std::span(payloads).subspan(1)), 0);
  EXPECT_EQ(b->import_blocks(), 0);
}

// Reserved blocks are held until the import finishes (and its prefix with them); blocks
// not written go back free; a block someone cached meanwhile is kept, ours freed.
TEST(KvCacheManagerTest, ImportHoldsItsBlocksUntilFinished) {
  auto m = MakeManager(8);
  const BlockHash root = m->RootHash("");
  const auto tokens = Iota(17);  // 4 full blocks
  const std::vector<BlockHash> chain = m->ChainHashes(root, tokens, 4);
  ASSERT_EQ(RunSequence(*m, 1, root, Iota(5)), 0);  // block 0 cached by a sequence
  ASSERT_EQ(m->CachedPrefixBlocks(root, tokens, chain), 1);

  std::vector<uint8_t*> to = m->ReserveImport(3, root, tokens, chain, 1, 3);
  ASSERT_EQ(to.size(), 3u);
  EXPECT_EQ(m->import_blocks(), 4);
  EXPECT_EQ(m->stats().blocks_used, 4);
  EXPECT_EQ(m->num_available_blocks(), 4);
  for (uint8_t* p : to) std::memset(p, 9, m->layout().block_bytes());
  // Meanwhile a sequence computes block 1 itself and caches it.
  ASSERT_EQ(RunSequence(*m, 2, root, Iota(9)), 4);
  // Two of three written: blocks 1 (the sequence's) and 2 (ours) cached, 3 freed.
  EXPECT_EQ(m->FinishImport(3, tokens, 2), 3);
  EXPECT_EQ(m->import_blocks(), 0);
  EXPECT_EQ(m->stats().blocks_used, 0);
  EXPECT_EQ(m->CachedPrefixBlocks(root, tokens, chain), 3);
  ASSERT_EQ(m->Open(5, root, tokens, 16), 12);
  EXPECT_NE(m->BlockPointers(5)[1][0], 9);  // the sequence's block, not ours
  EXPECT_EQ(m->BlockPointers(5)[2][0], 9);
  m->Close(5);
  EXPECT_EQ(m->FinishImport(3, tokens, 2), 0);  // finished already: unknown
}

// An import never takes blocks that sessions or sequences hold: it stops when the pool
// has nothing to spare, and what it imported is an unbroken prefix.
TEST(KvCacheManagerTest, ImportStopsWhenThePoolIsFull) {
  auto m = MakeManager(2);
  const BlockHash root = m->RootHash("");
  const auto tokens = Iota(17);
  const std::vector<BlockHash> chain = m->ChainHashes(root, tokens, 4);
  std::vector<uint8_t> bytes(m->layout().block_bytes(), 1);
  std::vector<std::span<const uint8_t>> payloads(4, std::span<const uint8_t>(bytes));
  ASSERT_EQ(m->Open(9, root, Iota(3, 500), 2), 0);
  ASSERT_TRUE(m->Reserve(9, 3));  // one block in use
  EXPECT_EQ(Import(*m, 1, root, tokens, chain, 0, payloads), 1);
  EXPECT_EQ(m->CachedPrefixBlocks(root, tokens, chain), 1);
  m->Close(9);
}

}  // namespace
}  // namespace kvserve::cache
