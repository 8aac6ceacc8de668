// Tests of TieredBlockStore over two in-memory stores (its behaviour over the disk tier is
// covered in disk_block_store_test.cc).
#include "cachesvc/tiered_block_store.h"

#include <gtest/gtest.h>

#include <memory>

#include "cachesvc/testing/map_block_store.h"
#include "cachesvc/testing/test_chain.h"

namespace kvserve::cachesvc {
namespace {

using testing::MakeTestChain;
using testing::MapBlockStore;
using testing::TestChain;

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
  void PutAll(BlockStore& store, const TestChain& chain, std::initializer_list<size_t> indexes) {
    for (size_t i : indexes) {
      ASSERT_TRUE(
          store.Put(chain.partition, chain.keys[i], chain.parents[i], chain.records[i], kNow).ok());
    }
  }

  MapBlockStore* memory_;
  MapBlockStore* disk_;
  std::unique_ptr<TieredBlockStore> store_;
};

TEST_F(TieredBlockStoreTest, PutWritesBothTiers) {
  const TestChain chain = MakeTestChain("a", 2);
  EXPECT_EQ(*store_->Put(chain.partition, chain.keys[0], chain.parents[0], chain.records[0], kNow),
            PutOutcome::kStored);
  EXPECT_EQ(*store_->Put(chain.partition, chain.keys[0], chain.parents[0], chain.records[0], kNow),
            PutOutcome::kAlreadyPresent);
  EXPECT_NE(*memory_->Get(chain.partition, chain.keys[0], kNow), nullptr);
  EXPECT_NE(*disk_->Get(chain.partition, chain.keys[0], kNow), nullptr);
  EXPECT_EQ(store_->name(), "memory+disk");
}

// A block counts when either tier has it; the prefix stops only where both miss.
TEST_F(TieredBlockStoreTest, LookupSpansGapsOfEitherTier) {
  const TestChain chain = MakeTestChain("a", 6);
  PutAll(*memory_, chain, {0, 1, 3, 4});
  PutAll(*disk_, chain, {0, 2, 3});
  absl::StatusOr<LookupResult> r = store_->Lookup(chain.partition, chain.keys, kNow);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->present_blocks, 5);
  EXPECT_EQ(r->present_bytes, static_cast<int64_t>(5 * chain.records[0]->size()));
  memory_->Erase(chain.partition, chain.keys[2]);
  disk_->Erase(chain.partition, chain.keys[2]);
  EXPECT_EQ(store_->Lookup(chain.partition, chain.keys, kNow)->present_blocks, 2);
  EXPECT_EQ(store_->Lookup(chain.partition, {}, kNow)->present_blocks, 0);
}

TEST_F(TieredBlockStoreTest, GetPromotesFromDisk) {
  const TestChain chain = MakeTestChain("a", 2);
  PutAll(*disk_, chain, {0, 1});
  absl::StatusOr<RecordPtr> got = store_->Get(chain.partition, chain.keys[1], kNow);
  ASSERT_TRUE(got.ok());
  ASSERT_NE(*got, nullptr);
  EXPECT_EQ(**got, *chain.records[1]);
  EXPECT_NE(*memory_->Get(chain.partition, chain.keys[1], kNow), nullptr);
  EXPECT_EQ(*memory_->Get(chain.partition, chain.keys[0], kNow), nullptr);
  EXPECT_EQ(*store_->Get(chain.partition, MakeTestChain("b", 1).keys[0], kNow), nullptr);
  store_->Erase(chain.partition, chain.keys[1]);
  EXPECT_EQ(*store_->Get(chain.partition, chain.keys[1], kNow), nullptr);
}

}  // namespace
}  // namespace kvserve::cachesvc
