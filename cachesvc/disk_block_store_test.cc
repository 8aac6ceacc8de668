#include "cachesvc/disk_block_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cachesvc/testing/block_chain.h"
#include "cachesvc/testing/map_block_store.h"
#include "cachesvc/tiered_block_store.h"

namespace kvserve::cachesvc {
namespace {

namespace fs = std::filesystem;
using testing::BlockChain;
using testing::MakeChain;

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

int64_t Count(const BlockStoreStats& stats, const std::string& reason) {
  for (const auto& [r, n] : stats.evictions) {
    if (r == reason) return n;
  }
  return 0;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Record files (*.kvb) under `dir`.
int CountFiles(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) ++n;
  }
  return n;
}

class DiskBlockStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("kvserve_disk_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<DiskBlockStore> Open(uint64_t capacity_bytes = 1 << 20) {
    DiskBlockStore::Options options;
    options.dir = dir_.string();
    options.index.capacity_bytes = capacity_bytes;
    absl::StatusOr<std::unique_ptr<DiskBlockStore>> store = DiskBlockStore::Create(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  static void PutChain(BlockStore& store, const BlockChain& chain, absl::Time now = kNow) {
    for (size_t i = 0; i < chain.hashes.size(); ++i) {
      ASSERT_EQ(
          *store.Put({chain.partition, chain.hashes[i]}, chain.parent(i), chain.record(i), now),
          PutOutcome::kStored)
          << i;
    }
  }
  static int32_t Present(BlockStore& store, const BlockChain& chain) {
    return store.Lookup(chain.partition, chain.hashes, kNow)->present_blocks;
  }
  // Every block of the chain that is stored has its parent stored: what is present is a
  // prefix. Checked block by block, not through Lookup (which stops at the first gap).
  static void ExpectPrefixOnly(BlockStore& store, const BlockChain& chain) {
    bool gap = false;
    for (size_t i = 0; i < chain.hashes.size(); ++i) {
      const bool present =
          store.Lookup(chain.partition, std::span(&chain.hashes[i], 1), kNow)->present_blocks == 1;
      EXPECT_FALSE(gap && present) << "block " << i << " present after a missing one";
      gap = gap || !present;
    }
  }

  fs::path dir_;
};

// kvserve_cache_evicted_blocks_total has a series from the start, at 0, for each reason a
// running store counts.
TEST_F(DiskBlockStoreTest, EveryRunningDropReasonIsReportedFromTheStart) {
  auto store = Open();
  const BlockStoreStats stats = store->stats();
  for (const auto& [reason, n] : stats.evictions) EXPECT_EQ(n, 0) << reason;
  for (const char* reason : {"idle", "quota", "missing_file", "corrupt_truncated",
                             "corrupt_bad_checksum", "corrupt_wrong_tokens"}) {
    EXPECT_TRUE(std::any_of(stats.evictions.begin(), stats.evictions.end(), [&](const auto& e) {
      return e.first == reason;
    })) << reason;
  }
}

TEST_F(DiskBlockStoreTest, PutGetLookup) {
  auto store = Open();
  const BlockChain chain = MakeChain(4, "a");
  PutChain(*store, chain);
  EXPECT_EQ(*store->Put({chain.partition, chain.hashes[2]}, chain.parent(2), chain.record(2), kNow),
            PutOutcome::kAlreadyPresent);
  for (size_t i = 0; i < 4; ++i) {
    absl::StatusOr<RecordPtr> got = store->Get({chain.partition, chain.hashes[i]}, kNow);
    ASSERT_TRUE(got.ok());
    ASSERT_NE(*got, nullptr);
    EXPECT_EQ(**got, chain.records[i]);
    // One file per block, in the two-level fan-out, holding exactly the record.
    const std::string path = store->FilePath(chain.partition, chain.hashes[i]);
    EXPECT_EQ(fs::path(path).parent_path().parent_path().parent_path(), dir_);
    EXPECT_EQ(ReadAll(path), chain.records[i]);
  }
  absl::StatusOr<LookupResult> r = store->Lookup(chain.partition, chain.hashes, kNow);
  EXPECT_EQ(r->present_blocks, 4);
  EXPECT_EQ(r->present_bytes, static_cast<int64_t>(4 * chain.records[0].size()));
  EXPECT_EQ(*store->Get({chain.partition, MakeChain(1, "a", 7).hashes[0]}, kNow), nullptr);
  // A block whose parent is not on disk could never be found: not stored.
  const BlockChain other = MakeChain(2, "a", 3);
  EXPECT_EQ(*store->Put({other.partition, other.hashes[1]}, other.parent(1), other.record(1), kNow),
            PutOutcome::kNoRoom);
  EXPECT_EQ(store->stats().blocks, 4);
  EXPECT_EQ(store->stats().bytes, static_cast<int64_t>(4 * chain.records[0].size()));
  store->Erase({chain.partition, chain.hashes[3]});
  EXPECT_FALSE(fs::exists(store->FilePath(chain.partition, chain.hashes[3])));
  EXPECT_EQ(Present(*store, chain), 3);
}

TEST_F(DiskBlockStoreTest, DifferentPartitionsNeverShareABlock) {
  auto store = Open();
  const BlockChain a = MakeChain(3, "tenant-a");
  const BlockChain b = MakeChain(3, "tenant-b");
  PutChain(*store, a);
  EXPECT_EQ(store->Lookup(b.partition, a.hashes, kNow)->present_blocks, 0);
  EXPECT_EQ(*store->Get({b.partition, a.hashes[0]}, kNow), nullptr);
  PutChain(*store, b);
  EXPECT_NE(store->FilePath(a.partition, a.hashes[0]), store->FilePath(b.partition, a.hashes[0]));
  EXPECT_EQ(Present(*store, a), 3);
  EXPECT_EQ(Present(*store, b), 3);
}

TEST_F(DiskBlockStoreTest, RestartSeesTheSameBlocksAndChains) {
  const BlockChain a = MakeChain(5, "a");
  const BlockChain b = MakeChain(2, "b");
  const size_t record_bytes = a.records[0].size();
  {
    auto store = Open();
    PutChain(*store, a);
    PutChain(*store, b);
  }
  // Reopened with room for 8 blocks: everything is there.
  auto store = Open(8 * record_bytes);
  EXPECT_EQ(Present(*store, a), 5);
  EXPECT_EQ(Present(*store, b), 2);
  for (size_t i = 0; i < 5; ++i)
    EXPECT_EQ(**store->Get({a.partition, a.hashes[i]}, kNow), a.records[i]);
  // The parent links survived: new blocks evict chain tails, never a middle block.
  const BlockChain c = MakeChain(4, "a", /*seed=*/5);
  PutChain(*store, c, kNow + absl::Seconds(1));
  EXPECT_LE(store->stats().bytes, static_cast<int64_t>(8 * record_bytes));
  EXPECT_EQ(Present(*store, c), 4);
  ExpectPrefixOnly(*store, a);
  ExpectPrefixOnly(*store, b);
  EXPECT_LT(Present(*store, a) + Present(*store, b), 7);
  EXPECT_EQ(CountFiles(dir_.string()), store->stats().blocks);
}

TEST_F(DiskBlockStoreTest, LeftoverTempFilesAreIgnoredAndDeleted) {
  const BlockChain a = MakeChain(3, "a");
  std::string path1, path2;
  {
    auto store = Open();
    PutChain(*store, a);
    path1 = store->FilePath(a.partition, a.hashes[1]);
    path2 = store->FilePath(a.partition, a.hashes[2]);
    store->Erase({a.partition, a.hashes[2]});
  }
  // A crash mid-write of block 2 left a partial temp file, and one of block 1 (rewritten
  // after an eviction) a whole one.
  WriteAll(path2 + ".tmp.17", a.records[2].substr(0, 100));
  WriteAll(path1 + ".tmp.3", a.records[1]);
  auto store = Open();
  EXPECT_EQ(Count(store->stats(), "startup_temp_file"), 2);
  EXPECT_EQ(Present(*store, a), 2);
  EXPECT_EQ(CountFiles(dir_.string()), 2);
  EXPECT_EQ(**store->Get({a.partition, a.hashes[1]}, kNow), a.records[1]);
}

TEST_F(DiskBlockStoreTest, CorruptFilesAreMissesCountedAndDeleted) {
  auto store = Open();
  const BlockChain a = MakeChain(4, "a");
  PutChain(*store, a);
  const std::string p0 = store->FilePath(a.partition, a.hashes[0]);
  const std::string p1 = store->FilePath(a.partition, a.hashes[1]);
  const std::string p2 = store->FilePath(a.partition, a.hashes[2]);
  const std::string p3 = store->FilePath(a.partition, a.hashes[3]);
  // Block 3: a payload byte flipped.
  std::string flipped = a.records[3];
  flipped[flipped.size() - 5] ^= 0x01;
  WriteAll(p3, flipped);
  EXPECT_EQ(*store->Get({a.partition, a.hashes[3]}, kNow), nullptr);
  EXPECT_EQ(Count(store->stats(), "corrupt_bad_checksum"), 1);
  EXPECT_FALSE(fs::exists(p3));
  // Block 2: truncated.
  fs::resize_file(p2, 100);
  EXPECT_EQ(*store->Get({a.partition, a.hashes[2]}, kNow), nullptr);
  EXPECT_EQ(Count(store->stats(), "corrupt_truncated"), 1);
  EXPECT_FALSE(fs::exists(p2));
  // Block 1: block 0's file renamed over it (same size, another key).
  fs::rename(p0, p1);
  EXPECT_EQ(*store->Get({a.partition, a.hashes[1]}, kNow), nullptr);
  EXPECT_EQ(Count(store->stats(), "corrupt_wrong_hash"), 1);
  EXPECT_FALSE(fs::exists(p1));
  // Block 0's file is gone: a miss, counted.
  EXPECT_EQ(*store->Get({a.partition, a.hashes[0]}, kNow), nullptr);
  EXPECT_EQ(Count(store->stats(), "missing_file"), 1);
  EXPECT_EQ(Present(*store, a), 0);
  EXPECT_EQ(store->stats().blocks, 0);
}

TEST_F(DiskBlockStoreTest, StartupDeletesBadAndOrphanedFiles) {
  const BlockChain a = MakeChain(5, "a");
  const BlockChain b = MakeChain(2, "b");
  std::vector<std::string> pa, pb;
  {
    auto store = Open();
    PutChain(*store, a);
    PutChain(*store, b);
    for (const BlockHash& k : a.hashes) pa.push_back(store->FilePath(a.partition, k));
    for (const BlockHash& k : b.hashes) pb.push_back(store->FilePath(b.partition, k));
  }
  // b[1]'s name holds b[0]'s record; a[2]'s header is damaged (so a[3], a[4] are orphans);
  // a file not named by us is left alone.
  WriteAll(pb[1], b.records[0]);
  std::string bad = a.records[2];
  bad[0] = 'X';
  WriteAll(pa[2], bad);
  WriteAll((dir_ / "README").string(), "operator notes");
  auto store = Open();
  const BlockStoreStats stats = store->stats();
  EXPECT_EQ(Count(stats, "startup_name_mismatch"), 1);
  EXPECT_EQ(Count(stats, "startup_bad_format"), 1);
  EXPECT_EQ(Count(stats, "startup_orphan"), 2);
  EXPECT_EQ(Present(*store, a), 2);
  EXPECT_EQ(Present(*store, b), 1);
  EXPECT_EQ(stats.blocks, 3);
  EXPECT_FALSE(fs::exists(pa[3]));
  EXPECT_FALSE(fs::exists(pb[1]));
  EXPECT_TRUE(fs::exists(dir_ / "README"));
}

TEST_F(DiskBlockStoreTest, VerifyOnOpenChecksWholeRecords) {
  const BlockChain a = MakeChain(2, "a");
  std::string p1;
  {
    auto store = Open();
    PutChain(*store, a);
    p1 = store->FilePath(a.partition, a.hashes[1]);
  }
  std::string flipped = a.records[1];
  flipped[flipped.size() - 1] ^= 0x01;
  WriteAll(p1, flipped);
  auto store = DiskBlockStore::Create(
      {.dir = dir_.string(), .index = {.capacity_bytes = 1 << 20}, .verify_on_open = true});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(Count((*store)->stats(), "startup_bad_checksum"), 1);
  EXPECT_EQ(Present(**store, a), 1);
}

// Over capacity, BlockIndex picks what goes and its files are deleted; every chain stays
// an unbroken prefix.
TEST_F(DiskBlockStoreTest, CapacityEvictionKeepsChainsCoherent) {
  const size_t record_bytes = MakeChain(1, "a").records[0].size();
  auto store = Open(10 * record_bytes);
  std::vector<BlockChain> chains;
  for (int s = 0; s < 6; ++s) {
    chains.push_back(MakeChain(5, "a", s));
    PutChain(*store, chains.back(), kNow + absl::Seconds(s));
    for (const BlockChain& c : chains) ExpectPrefixOnly(*store, c);
    const BlockStoreStats stats = store->stats();
    EXPECT_LE(stats.bytes, static_cast<int64_t>(10 * record_bytes));
    EXPECT_EQ(CountFiles(dir_.string()), stats.blocks);
  }
  EXPECT_EQ(Present(*store, chains.back()), 5);
  EXPECT_GT(Count(store->stats(), "idle"), 0);
  // A record larger than the whole capacity is refused.
  auto tiny = DiskBlockStore::Create(
      {.dir = (dir_ / "tiny").string(), .index = {.capacity_bytes = record_bytes - 1}});
  ASSERT_TRUE(tiny.ok());
  const BlockChain t = MakeChain(1, "t");
  EXPECT_EQ(*(*tiny)->Put({t.partition, t.hashes[0]}, t.parent(0), t.record(0), kNow),
            PutOutcome::kNoRoom);
}

TEST_F(DiskBlockStoreTest, ConcurrentUse) {
  auto store = Open(40 * MakeChain(1, "a").records[0].size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      for (int round = 0; round < 5; ++round) {
        const BlockChain c = MakeChain(4, "a", t * 10 + round % 3);
        for (size_t i = 0; i < c.hashes.size(); ++i) {
          ASSERT_TRUE(store->Put({c.partition, c.hashes[i]}, c.parent(i), c.record(i), kNow).ok());
        }
        for (size_t i = 0; i < c.hashes.size(); ++i) {
          absl::StatusOr<RecordPtr> got = store->Get({c.partition, c.hashes[i]}, kNow);
          ASSERT_TRUE(got.ok());
          if (*got != nullptr) {
            EXPECT_EQ(**got, c.records[i]);
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(CountFiles(dir_.string()), store->stats().blocks);
}

// The tiers together: blocks written through memory+disk survive a restart on disk and
// come back into memory when read.
TEST_F(DiskBlockStoreTest, TieredOverDiskSurvivesRestart) {
  const BlockChain a = MakeChain(3, "a");
  {
    TieredBlockStore tiered(std::make_unique<testing::MapBlockStore>(), Open());
    PutChain(tiered, a);
    EXPECT_EQ(Present(tiered, a), 3);
  }
  auto memory = std::make_unique<testing::MapBlockStore>();
  testing::MapBlockStore* memory_view = memory.get();
  TieredBlockStore tiered(std::move(memory), Open());
  EXPECT_EQ(Present(tiered, a), 3);
  EXPECT_EQ(Present(*memory_view, a), 0);
  EXPECT_EQ(**tiered.Get({a.partition, a.hashes[0]}, kNow), a.records[0]);
  EXPECT_EQ(Present(*memory_view, a), 1);
  EXPECT_EQ(tiered.stats().blocks, 3);
}

}  // namespace
}  // namespace kvserve::cachesvc
