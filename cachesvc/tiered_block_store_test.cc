// Tests of TieredBlockStore over two in-memory stores (its behaviour over the disk tier is
// covered in disk_block_store_test.cc).
#include "cachesvc/tiered_block_store.h"

#include <gtest/gtest.h>

#include <memory>

#include "cachesvc/testing/block_chain.h"
#include "cachesvc/testing/map_block_store.h"

namespace kvserve::cachesvc {
namespace {

using testing::BlockChain;
using testing::MakeChain;
using testing::MapBlockStore;

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

class TieredBlockStoreTest : public ::testing::Test {
 protected:
  TieredBlockStoreTest() {
    auto memory = std::make_unique<MapBlockStore>();
    auto disk = std::make_unique<MapBlockStore>();
    memory_ = memory.get();
    disk_ = disk.get();
    store_ = std::make_unique<TieredBlockStore>(std::move(memory), std::move(disk));
  }
  void PutAll(BlockStore& store, const BlockChain& chain, std::initializer_list<size_t> indexes) {
    for (size_t i : indexes) {
      ASSERT_TRUE(
          store.Put({chain.partition, chain.hashes[i]}, chain.parent(i), chain.record(i), kNow)
              .ok());
    }
  }

  MapBlockStore* memory_;
  MapBlockStore* disk_;
  std::unique_ptr<TieredBlockStore> store_;
};

TEST_F(TieredBlockStoreTest, PutWritesBothTiers) {
  const BlockChain chain = MakeChain(2, "a");
  EXPECT_EQ(
      *store_->Put({chain.partition, chain.hashes[0]}, chain.parent(0), chain.record(0), kNow),
      PutOutcome::kStored);
  EXPECT_EQ(
      *store_->Put({chain.partition, chain.hashes[0]}, chain.parent(0), chain.record(0), kNow),
      PutOutcome::kAlreadyPresent);
  EXPECT_NE(*memory_->Get({chain.partition, chain.hashes[0]}, kNow), nullptr);
  EXPECT_NE(*disk_->Get({chain.partition, chain.hashes[0]}, kNow), nullptr);
  EXPECT_EQ(store_->name(), "memory+disk");
}

// A block counts when either tier has it; the prefix stops only where both miss.
TEST_F(TieredBlockStoreTest, LookupSpansGapsOfEitherTier) {
  const BlockChain chain = MakeChain(6, "a");
  PutAll(*memory_, chain, {0, 1, 3, 4});
  PutAll(*disk_, chain, {0, 2, 3});
  absl::StatusOr<LookupResult> r = store_->Lookup(chain.partition, chain.hashes, kNow);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->present_blocks, 5);
  EXPECT_EQ(r->present_bytes, static_cast<int64_t>(5 * chain.records[0].size()));
  memory_->Erase({chain.partition, chain.hashes[2]});
  disk_->Erase({chain.partition, chain.hashes[2]});
  EXPECT_EQ(store_->Lookup(chain.partition, chain.hashes, kNow)->present_blocks, 2);
  EXPECT_EQ(store_->Lookup(chain.partition, {}, kNow)->present_blocks, 0);
}

TEST_F(TieredBlockStoreTest, GetPromotesFromDisk) {
  const BlockChain chain = MakeChain(2, "a");
  PutAll(*disk_, chain, {0, 1});
  absl::StatusOr<RecordPtr> got = store_->Get({chain.partition, chain.hashes[1]}, kNow);
  ASSERT_TRUE(got.ok());
  ASSERT_NE(*got, nullptr);
  EXPECT_EQ(**got, chain.records[1]);
  EXPECT_NE(*memory_->Get({chain.partition, chain.hashes[1]}, kNow), nullptr);
  EXPECT_EQ(*memory_->Get({chain.partition, chain.hashes[0]}, kNow), nullptr);
  EXPECT_EQ(*store_->Get({chain.partition, MakeChain(1, "b").hashes[0]}, kNow), nullptr);
  store_->Erase({chain.partition, chain.hashes[1]});
  EXPECT_EQ(*store_->Get({chain.partition, chain.hashes[1]}, kNow), nullptr);
}

}  // namespace
}  // namespace kvserve::cachesvc
