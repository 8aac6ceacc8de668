#include "cachesvc/memory_block_store.h"

#include <memory>
#include <string>

#include "cachesvc/testing/block_chain.h"
#include "gtest/gtest.h"

namespace kvserve::cachesvc {
namespace {

using testing::BlockChain;
using testing::MakeChain;

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

std::unique_ptr<MemoryBlockStore> NewStore(int64_t capacity, int64_t quota = 0) {
  auto store =
      MemoryBlockStore::Create({.capacity_bytes = capacity, .partition_quota_bytes = quota});
  EXPECT_TRUE(store.ok());
  return *std::move(store);
}

void PutChain(MemoryBlockStore& store, const BlockChain& c, absl::Time now = kNow) {
  for (size_t i = 0; i < c.hashes.size(); ++i) {
    ASSERT_TRUE(store.Put({c.partition, c.hashes[i]}, c.parent(i), c.record(i), now).ok());
  }
}

TEST(MemoryBlockStoreTest, PutLookupGet) {
  auto store = NewStore(1 << 20);
  const BlockChain c = MakeChain(4, "");
  PutChain(*store, c);
  LookupResult r = *store->Lookup(c.partition, c.hashes, kNow);
  EXPECT_EQ(r.present_blocks, 4);
  EXPECT_EQ(r.present_bytes, static_cast<int64_t>(4 * c.records[0].size()));
  RecordPtr got = *store->Get({c.partition, c.hashes[2]}, kNow);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(*got, c.records[2]);
  EXPECT_EQ(*store->Put({c.partition, c.hashes[0]}, c.partition,
                        std::make_shared<const std::string>(c.records[0]), kNow),
            PutOutcome::kAlreadyPresent);
  EXPECT_EQ(store->stats().blocks, 4);
}

TEST(MemoryBlockStoreTest, LookupStopsAtTheFirstGap) {
  auto store = NewStore(1 << 20);
  const BlockChain c = MakeChain(4, "");
  PutChain(*store, c);
  store->Erase({c.partition, c.hashes[2]});
  EXPECT_EQ(store->Lookup(c.partition, c.hashes, kNow)->present_blocks, 2);
}

TEST(MemoryBlockStoreTest, AnOrphanIsNotStored) {
  auto store = NewStore(1 << 20);
  const BlockChain c = MakeChain(3, "");
  EXPECT_EQ(*store->Put({c.partition, c.hashes[1]}, c.hashes[0],
                        std::make_shared<const std::string>(c.records[1]), kNow),
            PutOutcome::kNoRoom);
  EXPECT_EQ(*store->Get({c.partition, c.hashes[1]}, kNow), nullptr);
}

TEST(MemoryBlockStoreTest, PartitionsNeverShare) {
  auto store = NewStore(1 << 20);
  const BlockChain a = MakeChain(2, "tenant-a");
  const BlockChain b = MakeChain(2, "tenant-b");
  PutChain(*store, a);
  EXPECT_EQ(store->Lookup(b.partition, a.hashes, kNow)->present_blocks, 0);
  EXPECT_EQ(*store->Get({b.partition, a.hashes[0]}, kNow), nullptr);
}

TEST(MemoryBlockStoreTest, EvictionKeepsChainsCoherent) {
  const BlockChain probe = MakeChain(1, "");
  const int64_t record = static_cast<int64_t>(probe.records[0].size());
  auto store = NewStore(10 * record);
  // Three chains of 6 blocks into room for 10: every lookup must see a prefix whose
  // every block is present (no block whose parent is gone is ever reported).
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const BlockChain c = MakeChain(6, "", seed);
    PutChain(*store, c, kNow + absl::Seconds(seed));
  }
  EXPECT_LE(store->stats().bytes, 10 * record);
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const BlockChain c = MakeChain(6, "", seed);
    const int32_t n = store->Lookup(c.partition, c.hashes, kNow)->present_blocks;
    for (int32_t i = 0; i < n; ++i) {
      EXPECT_NE(*store->Get({c.partition, c.hashes[i]}, kNow), nullptr) << seed << " " << i;
    }
  }
  int64_t evicted = 0;
  for (const auto& [reason, count] : store->stats().evictions) evicted += count;
  EXPECT_EQ(evicted, 18 - store->stats().blocks);
}

TEST(MemoryBlockStoreTest, NoRoomForARecordLargerThanTheCapacityOrQuota) {
  const BlockChain c = MakeChain(1, "");
  const int64_t record = static_cast<int64_t>(c.records[0].size());
  auto small = NewStore(record - 1);
  EXPECT_EQ(*small->Put({c.partition, c.hashes[0]}, c.partition,
                        std::make_shared<const std::string>(c.records[0]), kNow),
            PutOutcome::kNoRoom);
  auto quota = NewStore(100 * record, record - 1);
  EXPECT_EQ(*quota->Put({c.partition, c.hashes[0]}, c.partition,
                        std::make_shared<const std::string>(c.records[0]), kNow),
            PutOutcome::kNoRoom);
}

TEST(MemoryBlockStoreTest, QuotaEvictsWithinThePartitionOnly) {
  const BlockChain a = MakeChain(4, "a");
  const BlockChain b = MakeChain(4, "b");
  const int64_t record = static_cast<int64_t>(a.records[0].size());
  auto store = NewStore(100 * record, 4 * record);
  PutChain(*store, a);
  PutChain(*store, b);
  const BlockChain b2 = MakeChain(2, "b", 7);
  PutChain(*store, b2, kNow + absl::Seconds(1));
  EXPECT_EQ(store->Lookup(a.partition, a.hashes, kNow)->present_blocks, 4);
  EXPECT_EQ(store->Lookup(b2.partition, b2.hashes, kNow)->present_blocks, 2);
}

TEST(MemoryBlockStoreTest, CreateRejectsBadOptions) {
  EXPECT_FALSE(MemoryBlockStore::Create({.capacity_bytes = 0}).ok());
  EXPECT_FALSE(MemoryBlockStore::Create({.capacity_bytes = 1, .partition_quota_bytes = -1}).ok());
}

}  // namespace
}  // namespace kvserve::cachesvc
