#include "cache/block_pool.h"

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cache/block_hash.h"
#include "gtest/gtest.h"

namespace kvserve::cache {
namespace {

model::KvLayout TinyLayout() { return model::KvLayout{2, 8, 4, model::DType::kF32}; }

std::unique_ptr<BlockPool> MakePool(int blocks) {
  BlockPool::Options o;
  o.layout = TinyLayout();
  o.budget_bytes = static_cast<size_t>(blocks) * o.layout.block_bytes();
  auto pool = BlockPool::Create(o);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return *std::move(pool);
}

std::vector<int32_t> Tokens(int32_t start) { return {start, start + 1, start + 2, start + 3}; }

TEST(BlockHashTest, MurmurMatchesPublishedVector) {
  const std::string s = "The quick brown fox jumps over the lazy dog";
  const BlockHash h = Murmur3x64_128(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0);
  EXPECT_EQ(h.lo, 0xe34bbc7bbc071b6cULL);
  EXPECT_EQ(h.hi, 0x7a433ca9c49a9347ULL);
  EXPECT_EQ(Murmur3x64_128({}, 0), (BlockHash{0, 0}));
}

TEST(BlockHashTest, ChainDependsOnEveryInput) {
  const KvIdentity identity{42, 2, model::KvLayout{2, 8, 16, model::DType::kF32}};
  const BlockHash root = RootBlockHash(identity, "");
  EXPECT_NE(root, RootBlockHash(KvIdentity{43, 2, identity.layout}, ""));
  EXPECT_NE(root, RootBlockHash(identity, "tenant-a"));
  // Every part of the layout is part of the identity.
  for (auto change : std::vector<void (*)(KvIdentity&)>{
           [](KvIdentity& i) { i.kv_heads = 1; }, [](KvIdentity& i) { i.layout.n_layers = 3; },
           [](KvIdentity& i) { i.layout.kv_dim = 16; },
           [](KvIdentity& i) { i.layout.block_tokens = 32; },
           [](KvIdentity& i) { i.layout.dtype = model::DType::kF16; }}) {
    KvIdentity other = identity;
    change(other);
    EXPECT_NE(root, RootBlockHash(other, ""));
  }
  EXPECT_NE(RootBlockHash(identity, "a"), RootBlockHash(identity, "b"));
  const std::vector<int32_t> t = Tokens(5);
  const BlockHash h = ChainBlockHash(root, t);
  EXPECT_EQ(h, ChainBlockHash(root, t));
  EXPECT_NE(h, ChainBlockHash(RootBlockHash(identity, "x"), t));
  std::vector<int32_t> t2 = t;
  t2[3] = 99;
  EXPECT_NE(h, ChainBlockHash(root, t2));
}

TEST(BlockPoolTest, CreateRejectsTinyBudget) {
  BlockPool::Options o;
  o.layout = TinyLayout();
  o.budget_bytes = o.layout.block_bytes() - 1;
  EXPECT_EQ(BlockPool::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.layout.kv_dim = 0;
  o.budget_bytes = 1 << 20;
  EXPECT_EQ(BlockPool::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlockPoolTest, AllocateIsAllOrNothingAndBlocksAreDistinctAligned) {
  auto pool = MakePool(4);
  ASSERT_EQ(pool->num_blocks(), 4);
  std::vector<BlockId> a;
  ASSERT_TRUE(pool->Allocate(3, &a));
  EXPECT_EQ(pool->num_used(), 3);
  std::vector<BlockId> b;
  EXPECT_FALSE(pool->Allocate(2, &b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool->num_used(), 3);
  for (BlockId id : a) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pool->data(id)) % 64, 0u);
    std::memset(pool->data(id), id, pool->layout().block_bytes());  // whole block writable
  }
  pool->Release(a);
  EXPECT_EQ(pool->num_used(), 0);
  EXPECT_EQ(pool->num_free_uncached(), 4);
}

TEST(BlockPoolTest, RegisteredBlocksStayFindableUntilEvicted) {
  auto pool = MakePool(2);
  const BlockHash root = RootBlockHash(KvIdentity{1, 0, {}}, "");
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool->Allocate(1, &ids));
  const auto t = Tokens(10);
  const BlockHash h = ChainBlockHash(root, t);
  ASSERT_TRUE(pool->Register(ids[0], h, root, t));
  pool->Release(ids);
  EXPECT_EQ(pool->num_cached(), 1);
  ASSERT_EQ(pool->Find(h, root, t), ids[0]);
  // Same key but different tokens or parent (a forced collision) is never a hit.
  EXPECT_FALSE(pool->Find(h, root, Tokens(11)).has_value());
  EXPECT_FALSE(pool->Find(h, RootBlockHash(KvIdentity{2, 0, {}}, ""), t).has_value());
  // Ref moves it out of the evictable set.
  pool->Ref(ids[0]);
  EXPECT_EQ(pool->num_cached(), 0);
  std::vector<BlockId> more;
  EXPECT_FALSE(pool->Allocate(2, &more));
  pool->Release(ids);
  // Now both blocks can be handed out: the cached one gets evicted.
  ASSERT_TRUE(pool->Allocate(2, &more));
  EXPECT_EQ(pool->evictions_total(), 1);
  EXPECT_FALSE(pool->Find(h, root, t).has_value());
}

TEST(BlockPoolTest, DuplicateKeyIsNotRegisteredTwice) {
  auto pool = MakePool(2);
  const BlockHash root = RootBlockHash(KvIdentity{1, 0, {}}, "");
  const auto t = Tokens(0);
  const BlockHash h = ChainBlockHash(root, t);
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool->Allocate(2, &ids));
  EXPECT_TRUE(pool->Register(ids[0], h, root, t));
  EXPECT_FALSE(pool->Register(ids[1], h, root, t));
  pool->Release(ids);
  EXPECT_EQ(pool->num_cached(), 1);
  EXPECT_EQ(pool->num_free_uncached(), 1);
}

TEST(BlockPoolTest, EvictsLeastRecentlyReleasedChainsTailFirst) {
  auto pool = MakePool(6);
  const BlockHash root = RootBlockHash(KvIdentity{1, 0, {}}, "");
  // Two chains of three blocks: A released first, then B.
  std::vector<BlockHash> keys[2];
  std::vector<BlockId> chains[2];
  for (int c = 0; c < 2; ++c) {
    ASSERT_TRUE(pool->Allocate(3, &chains[c]));
    BlockHash parent = root;
    for (int i = 0; i < 3; ++i) {
      const auto t = Tokens(100 * c + 4 * i);
      const BlockHash h = ChainBlockHash(parent, t);
      ASSERT_TRUE(pool->Register(chains[c][static_cast<size_t>(i)], h, parent, t));
      keys[c].push_back(h);
      parent = h;
    }
  }
  pool->Release(chains[0]);
  pool->Release(chains[1]);
  auto cached = [&](int c, int i) {
    const BlockHash parent = i == 0 ? root : keys[c][static_cast<size_t>(i - 1)];
    return pool->Find(keys[c][static_cast<size_t>(i)], parent, Tokens(100 * c + 4 * i)).has_value();
  };
  std::vector<BlockId> taken;
  // Each new block evicts the tail of the least recently used chain that remains.
  ASSERT_TRUE(pool->Allocate(1, &taken));
  EXPECT_TRUE(cached(0, 0) && cached(0, 1) && !cached(0, 2));
  ASSERT_TRUE(pool->Allocate(1, &taken));
  EXPECT_TRUE(cached(0, 0) && !cached(0, 1));
  ASSERT_TRUE(pool->Allocate(2, &taken));
  EXPECT_FALSE(cached(0, 0));
  EXPECT_TRUE(cached(1, 0) && cached(1, 1) && !cached(1, 2));
}

TEST(BlockPoolTest, SharedPrefixOutlivesTails) {
  // Chain head H shared by two sequences, each with its own tail block.
  auto pool = MakePool(3);
  const BlockHash root = RootBlockHash(KvIdentity{1, 0, {}}, "");
  std::vector<BlockId> head;
  ASSERT_TRUE(pool->Allocate(1, &head));
  const auto th = Tokens(0);
  const BlockHash hh = ChainBlockHash(root, th);
  ASSERT_TRUE(pool->Register(head[0], hh, root, th));
  pool->Ref(head[0]);  // second sequence
  std::vector<BlockId> tails;
  ASSERT_TRUE(pool->Allocate(2, &tails));
  for (int i = 0; i < 2; ++i) {
    const auto t = Tokens(10 + 10 * i);
    ASSERT_TRUE(pool->Register(tails[static_cast<size_t>(i)], ChainBlockHash(hh, t), hh, t));
  }
  const std::vector<BlockId> seq0 = {head[0], tails[0]};
  const std::vector<BlockId> seq1 = {head[0], tails[1]};
  pool->Release(seq0);
  pool->Release(seq1);
  EXPECT_EQ(pool->num_cached(), 3);
  std::vector<BlockId> taken;
  ASSERT_TRUE(pool->Allocate(2, &taken));  // both tails go before the shared head
  EXPECT_TRUE(pool->Find(hh, root, th).has_value());
}

}  // namespace
}  // namespace kvserve::cache
