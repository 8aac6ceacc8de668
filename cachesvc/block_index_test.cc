#include "cachesvc/block_index.h"

#include <memory>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::cachesvc {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const BlockHash kTenantA{1, 100};
const BlockHash kTenantB{2, 200};
const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

BlockHash H(uint64_t id) { return BlockHash{id, 7}; }

std::unique_ptr<BlockIndex> MakeIndex(uint64_t capacity, Policy policy = Policy::kConversation,
                                      uint64_t quota = 0) {
  BlockIndexOptions options;
  options.capacity_bytes = capacity;
  options.partition_quota_bytes = quota;
  options.policy = policy;
  absl::StatusOr<std::unique_ptr<BlockIndex>> index = BlockIndex::Create(options);
  EXPECT_TRUE(index.ok()) << index.status();
  return *std::move(index);
}

// Inserts ids as one chain (1 byte each) and returns every evicted key id.
std::vector<uint64_t> InsertChain(BlockIndex& index, const std::vector<uint64_t>& ids,
                                  const BlockHash& partition = kTenantA, absl::Time now = kT0) {
  std::vector<uint64_t> evicted;
  std::optional<BlockHash> parent;
  for (uint64_t id : ids) {
    absl::StatusOr<InsertResult> r = index.Insert(partition, H(id), parent, 1, now);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) break;
    EXPECT_NE(r->outcome, InsertOutcome::kNoRoom);
    for (const Evicted& e : r->evicted) evicted.push_back(e.key.lo);
    parent = H(id);
  }
  return evicted;
}

int32_t Prefix(BlockIndex& index, const std::vector<uint64_t>& ids,
               const BlockHash& partition = kTenantA, absl::Time now = kT0) {
  std::vector<BlockHash> chain;
  for (uint64_t id : ids) chain.push_back(H(id));
  return index.LongestPrefix(partition, chain, now, /*touch=*/false);
}

TEST(BlockIndexTest, CreateRejectsZeroCapacity) {
  BlockIndexOptions options;
  EXPECT_EQ(BlockIndex::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlockIndexTest, LongestPrefixCountsPresentRunAndBytes) {
  auto index = MakeIndex(100);
  InsertChain(*index, {1, 2, 3});
  uint64_t bytes = 0;
  std::vector<BlockHash> chain = {H(1), H(2), H(3), H(4)};
  EXPECT_EQ(index->LongestPrefix(kTenantA, chain, kT0, false, &bytes), 3);
  EXPECT_EQ(bytes, 3u);
  EXPECT_EQ(Prefix(*index, {4, 1}), 0);  // a run from the first block only
  EXPECT_EQ(Prefix(*index, {1, 2, 3}, kTenantB), 0);
}

TEST(BlockIndexTest, EvictsTailFirst) {
  auto index = MakeIndex(4);
  InsertChain(*index, {1, 2, 3, 4});
  // A fifth block of another chain needs one slot: the oldest chain loses its tail, not
  // its (older) first block.
  EXPECT_THAT(InsertChain(*index, {10}), ElementsAre(4));
  EXPECT_EQ(Prefix(*index, {1, 2, 3, 4}), 3);
  EXPECT_THAT(InsertChain(*index, {10, 11, 12}), ElementsAre(3, 2));
  EXPECT_EQ(Prefix(*index, {1, 2, 3, 4}), 1);
  EXPECT_TRUE(index->Contains(kTenantA, H(1)));
}

TEST(BlockIndexTest, SharedPrefixOutlivesContinuations) {
  auto index = MakeIndex(6);
  InsertChain(*index, {1, 2, 3});  // shared prefix 1, 2
  InsertChain(*index, {1, 2, 4});
  InsertChain(*index, {1, 2, 5});
  // The prefix is older than every continuation, yet only continuations go.
  std::vector<uint64_t> evicted = InsertChain(*index, {20, 21, 22});
  EXPECT_EQ(evicted.size(), 2u);
  for (uint64_t id : evicted) EXPECT_TRUE(id == 3 || id == 4 || id == 5) << id;
  EXPECT_TRUE(index->Contains(kTenantA, H(1)));
  EXPECT_TRUE(index->Contains(kTenantA, H(2)));
}

TEST(BlockIndexTest, ExpiredSessionsGoFirstLiveSessionsLast) {
  auto index = MakeIndex(6);
  InsertChain(*index, {1, 2});  // expired session
  InsertChain(*index, {3, 4});  // live session, least recently used of all
  InsertChain(*index, {5, 6});  // no session
  index->SetSession("old", kTenantA, H(2), kT0 + absl::Seconds(10), kT0);
  index->SetSession("live", kTenantA, H(4), kT0 + absl::Hours(1), kT0);
  // Touch chain 1 so that recency alone would evict chain 3-4 then 5-6 first.
  Prefix(*index, {1, 2});
  std::vector<BlockHash> c1 = {H(1), H(2)};
  index->LongestPrefix(kTenantA, c1, kT0, /*touch=*/true);
  const absl::Time later = kT0 + absl::Minutes(1);  // "old" has expired
  EXPECT_THAT(InsertChain(*index, {7, 8}, kTenantA, later), ElementsAre(2, 1));
  // Idle blocks next: one-time tails (6, then the newer 8) before extended blocks.
  EXPECT_THAT(InsertChain(*index, {9, 10}, kTenantA, later), ElementsAre(6, 8));
  EXPECT_THAT(InsertChain(*index, {40, 41, 42, 43}, kTenantA, later), ElementsAre(10, 5, 7, 9));
  // Only the live session's blocks are evictable now: pressure reaches them, tail first.
  EXPECT_TRUE(index->Contains(kTenantA, H(3)));
  EXPECT_TRUE(index->Contains(kTenantA, H(4)));
  absl::StatusOr<InsertResult> r = index->Insert(kTenantA, H(44), H(43), 1, later);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->evicted.size(), 1u);
  EXPECT_EQ(r->evicted[0].key, H(4));
  EXPECT_EQ(r->evicted[0].reason, EvictReason::kLiveSession);
  BlockIndexStats st = index->stats();
  EXPECT_EQ(st.evictions_total[static_cast<int>(EvictReason::kExpiredSession)], 2);
  EXPECT_EQ(st.live_sessions, 1);
  EXPECT_EQ(st.expired_sessions, 1);
}

TEST(BlockIndexTest, LiveSessionIsEvictedTailFirstUnderPressure) {
  auto index = MakeIndex(3);
  InsertChain(*index, {1, 2, 3});
  index->SetSession("s", kTenantA, H(3), kT0 + absl::Hours(1), kT0);
  absl::StatusOr<InsertResult> r = index->Insert(kTenantA, H(9), std::nullopt, 1, kT0);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->evicted.size(), 1u);
  EXPECT_EQ(r->evicted[0].key, H(3));
  EXPECT_EQ(r->evicted[0].reason, EvictReason::kLiveSession);
  // The session's mark moved to block 2: it still outranks idle block 9.
  r = index->Insert(kTenantA, H(10), std::nullopt, 1, kT0);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->evicted.size(), 1u);
  EXPECT_EQ(r->evicted[0].key, H(9));
  EXPECT_EQ(Prefix(*index, {1, 2, 3}), 2);
  index->RemoveSession("s");
  EXPECT_EQ(index->stats().live_sessions, 0);
}

TEST(BlockIndexTest, QuotaIsPerPartition) {
  auto index = MakeIndex(/*capacity=*/100, Policy::kConversation, /*quota=*/3);
  InsertChain(*index, {1, 2, 3}, kTenantA);
  InsertChain(*index, {1, 2, 3}, kTenantB);  // same keys, separate entries
  absl::StatusOr<InsertResult> r = index->Insert(kTenantA, H(4), H(3), 1, kT0);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->outcome, InsertOutcome::kNoRoom);  // its own chain fills the quota
  r = index->Insert(kTenantA, H(7), std::nullopt, 1, kT0);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->evicted.size(), 1u);
  EXPECT_EQ(r->evicted[0].partition, kTenantA);
  EXPECT_EQ(r->evicted[0].key, H(3));
  EXPECT_EQ(r->evicted[0].reason, EvictReason::kQuota);
  EXPECT_EQ(Prefix(*index, {1, 2, 3}, kTenantB), 3);  // the other tenant is untouched
  EXPECT_EQ(index->Insert(kTenantA, H(8), std::nullopt, 4, kT0).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(BlockIndexTest, LruBaselineEvictsLeastRecentlyUsedEvenIfItBreaksChains) {
  auto index = MakeIndex(4, Policy::kLru);
  InsertChain(*index, {1, 2, 3, 4});
  EXPECT_THAT(InsertChain(*index, {10}), ElementsAre(1));  // the head: plain LRU
  EXPECT_EQ(Prefix(*index, {1, 2, 3, 4}), 0);              // never read as whole
  std::vector<BlockHash> c = {H(10)};
  index->LongestPrefix(kTenantA, c, kT0, /*touch=*/false);
  std::vector<BlockHash> c2 = {H(1)};  // absent: touches nothing
  index->LongestPrefix(kTenantA, c2, kT0, /*touch=*/true);
  // Re-inserting 2 touches it: 3 is now the least recent.
  ASSERT_TRUE(index->Insert(kTenantA, H(2), std::nullopt, 1, kT0).ok());
  EXPECT_THAT(InsertChain(*index, {11}), ElementsAre(3));
  EXPECT_THAT(InsertChain(*index, {12}), ElementsAre(4));
  EXPECT_THAT(InsertChain(*index, {13}), ElementsAre(10));
}

TEST(BlockIndexTest, PartialChainsNeverReadAsWhole) {
  auto index = MakeIndex(10);
  for (uint64_t c = 0; c < 5; ++c) {
    InsertChain(*index, {100 * c + 1, 100 * c + 2, 100 * c + 3, 100 * c + 4});
  }
  for (uint64_t c = 0; c < 5; ++c) {
    const int32_t k = Prefix(*index, {100 * c + 1, 100 * c + 2, 100 * c + 3, 100 * c + 4});
    for (int32_t i = 0; i < 4; ++i) {
      // Every block past the found prefix is absent: no chain has a hole.
      EXPECT_EQ(index->Contains(kTenantA, H(100 * c + 1 + i)), i < k) << c << " " << i;
    }
  }
  EXPECT_EQ(index->stats().blocks, 10);
}

TEST(BlockIndexTest, ReinsertTouchesAndDoesNotDuplicate) {
  auto index = MakeIndex(3);
  InsertChain(*index, {1});
  InsertChain(*index, {2});
  absl::StatusOr<InsertResult> r = index->Insert(kTenantA, H(1), std::nullopt, 1, kT0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, InsertOutcome::kTouched);
  EXPECT_THAT(r->evicted, IsEmpty());
  EXPECT_EQ(index->stats().blocks, 2);
  EXPECT_EQ(index->bytes(), 2u);
  InsertChain(*index, {3});
  // 1 was used twice (and most recently of 1 and 2): 2 goes first.
  EXPECT_THAT(InsertChain(*index, {4}), ElementsAre(2));
}

TEST(BlockIndexTest, EraseOfMiddleBlockCutsThePrefix) {
  auto index = MakeIndex(10);
  InsertChain(*index, {1, 2, 3, 4});
  EXPECT_TRUE(index->Erase(kTenantA, H(2)));
  EXPECT_FALSE(index->Erase(kTenantA, H(2)));
  EXPECT_EQ(Prefix(*index, {1, 2, 3, 4}), 1);
  EXPECT_EQ(index->stats().erased_total, 1);
  // Inserting it again makes the rest reachable (its descendants stayed).
  ASSERT_TRUE(index->Insert(kTenantA, H(2), H(1), 1, kT0).ok());
  EXPECT_EQ(Prefix(*index, {1, 2, 3, 4}), 4);
}

TEST(BlockIndexTest, InsertErrors) {
  auto index = MakeIndex(4);
  EXPECT_EQ(index->Insert(kTenantA, H(1), std::nullopt, 0, kT0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(index->Insert(kTenantA, H(1), std::nullopt, 5, kT0).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(index->Insert(kTenantA, H(2), H(1), 1, kT0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index->stats().blocks, 0);
}

TEST(BlockIndexTest, ChainLongerThanCapacityStopsWithNoRoom) {
  auto index = MakeIndex(3);
  InsertChain(*index, {1, 2, 3});
  absl::StatusOr<InsertResult> r = index->Insert(kTenantA, H(4), H(3), 1, kT0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, InsertOutcome::kNoRoom);
  EXPECT_EQ(Prefix(*index, {1, 2, 3}), 3);  // its own ancestors were not evicted
}

// Blocks 1, 2 used 9 times each, then blocks 5 -> 6 used once; inserting 7 -> 8 into a
// cache of 4 evicts two blocks. When `teach`, first shows the index that blocks used often
// come back after eviction and blocks used once do not.
std::vector<uint64_t> EvictedAfterFrequentAndOneTimeUse(bool teach) {
  auto index = MakeIndex(4);
  if (teach) {
    for (int i = 0; i < 9; ++i) InsertChain(*index, {1, 2});
    for (uint64_t fresh = 1000; fresh < 1008; fresh += 2) InsertChain(*index, {fresh, fresh + 1});
    EXPECT_FALSE(index->Contains(kTenantA, H(1)));  // evicted: it comes back below
  }
  for (int i = 0; i < 9; ++i) InsertChain(*index, {1, 2});
  InsertChain(*index, {5, 6});
  return InsertChain(*index, {7, 8});
}

TEST(BlockIndexTest, UseCountEarnsCreditWhenFrequentUseProvedToPredictReturns) {
  // Block 6 (a one-time tail) goes first either way; then, with nothing learned, recency
  // decides (2, older, before 5); once frequently used blocks were seen to return and blocks
  // used once were not, 5 (newer, used once) goes before 2.
  EXPECT_THAT(EvictedAfterFrequentAndOneTimeUse(/*teach=*/false), ElementsAre(6, 2));
  EXPECT_THAT(EvictedAfterFrequentAndOneTimeUse(/*teach=*/true), ElementsAre(6, 5));
}

// A prefix (1, 2) continued three ways, each continuation extended; then a newer chain
// 50 -> 51 and pressure from a long chain: returns whether the branched prefix outlived
// the newer chain's first block.
bool BranchedPrefixOutlivesNewerChain(int64_t reuse_credit_ticks) {
  BlockIndexOptions options;
  options.capacity_bytes = 10;
  options.reuse_credit_ticks = reuse_credit_ticks;
  auto index = *BlockIndex::Create(options);
  for (uint64_t b : {10, 20, 30}) InsertChain(*index, {1, 2, b, b + 1});
  InsertChain(*index, {50, 51});
  InsertChain(*index, {60, 61, 62, 63, 64, 65, 66, 67});
  EXPECT_FALSE(index->Contains(kTenantA, H(10)));
  return index->Contains(kTenantA, H(2)) && !index->Contains(kTenantA, H(50));
}

TEST(BlockIndexTest, PrefixWithSeveralContinuationsEarnsCredit) {
  EXPECT_TRUE(BranchedPrefixOutlivesNewerChain(12'000));
  EXPECT_FALSE(BranchedPrefixOutlivesNewerChain(0));  // recency alone: the older prefix goes
}

TEST(BlockIndexTest, RememberedUseCountSurvivesEviction) {
  // Quota 2 of capacity 10: each new block evicts within the tenant.
  auto index = MakeIndex(10, Policy::kConversation, /*quota=*/2);
  for (int i = 0; i < 8; ++i) InsertChain(*index, {1});  // used 8 times
  InsertChain(*index, {2});
  InsertChain(*index, {3});  // evicts 2 (one-time tail), not 1
  EXPECT_TRUE(index->Contains(kTenantA, H(1)));
  EXPECT_EQ(index->Erase(kTenantA, H(3)), true);
  // Evict 1 through pressure from a block used more often than it.
  for (int i = 0; i < 40; ++i) InsertChain(*index, {4});
  InsertChain(*index, {5});  // 1 is the least valuable of {1, 4} now? 5 is a one-time tail
  InsertChain(*index, {6});  // evicts 5
  // A block that comes back resumes its count: its return is recorded.
  const int64_t before = index->stats().history_hits_total;
  InsertChain(*index, {2});
  EXPECT_EQ(index->stats().history_hits_total, before + 1);
  EXPECT_GE(index->stats().history_blocks, 1);
}

void EndRequest(BlockIndex& index, const std::vector<uint64_t>& ids) {
  std::vector<BlockHash> chain;
  for (uint64_t id : ids) chain.push_back(H(id));
  index.EndRequest(kTenantA, chain, kT0);
}

// Inserts and reports one request.
void Request(BlockIndex& index, const std::vector<uint64_t>& ids) {
  InsertChain(index, ids);
  EndRequest(index, ids);
}

TEST(BlockIndexTest, EndRequestDetectsConversationTurns) {
  auto index = MakeIndex(100);
  Request(*index, {1, 2, 3, 4});
  Request(*index, {1, 2, 3, 5, 6});     // the first chain but its last block, extended: a turn
  Request(*index, {1, 2, 9});           // shares only a prefix of it: not a turn
  Request(*index, {1, 3, 4});           // shares block 1 only: not a turn
  Request(*index, {1, 2, 3, 5, 6, 7});  // extends the second (whole) chain: a turn
  Request(*index, {8});                 // too short to be a turn or to be continued
  EXPECT_EQ(index->stats().requests_total, 6);
  EXPECT_EQ(index->stats().conversation_turns_total, 2);
  // The LRU baseline counts turns as well (and ignores them).
  auto lru = MakeIndex(100, Policy::kLru);
  Request(*lru, {1, 2, 3});
  Request(*lru, {1, 2, 4, 5});
  EXPECT_EQ(lru->stats().conversation_turns_total, 1);
}

// Twenty conversations whose first turns (3 blocks) all got a second and a third turn, and
// twenty one-off requests of 6 blocks (240 blocks, no eviction yet); then one new request of each
// kind, the one-off last. Under pressure, returns whether the new conversation's first blocks
// outlived the whole newer one-off chain.
bool ContinuingClassOutlivesNewerOneOff(int64_t conversation_credit_ticks) {
  BlockIndexOptions options;
  options.capacity_bytes = 260;
  options.conversation_credit_ticks = conversation_credit_ticks;
  auto index = *BlockIndex::Create(options);
  for (uint64_t i = 0; i < 20; ++i) {
    const uint64_t b = 1000 + 10 * i;
    Request(*index, {b, b + 1, b + 2});
    Request(*index, {b, b + 1, b + 3, b + 4});
    Request(*index, {b, b + 1, b + 3, b + 5});
  }
  for (uint64_t i = 0; i < 20; ++i) {
    const uint64_t b = 2000 + 10 * i;
    Request(*index, {b, b + 1, b + 2, b + 3, b + 4, b + 5});
  }
  EXPECT_EQ(index->stats().conversation_turns_total, 40);
  Request(*index, {900, 901, 902});
  Request(*index, {910, 911, 912, 913, 914, 915});
  EXPECT_EQ(index->stats().evictions_total[static_cast<int>(EvictReason::kIdle)], 0);
  // A new chain (not reported) takes the room block by block until the one-off is gone.
  std::optional<BlockHash> parent;
  for (uint64_t id = 5000; id < 5300 && index->Contains(kTenantA, H(910)); ++id) {
    EXPECT_TRUE(index->Insert(kTenantA, H(id), parent, 1, kT0).ok());
    parent = H(id);
  }
  EXPECT_FALSE(index->Contains(kTenantA, H(910)));
  return index->Contains(kTenantA, H(900)) && index->Contains(kTenantA, H(901));
}

TEST(BlockIndexTest, ConversationCreditKeepsLikelyContinuedRequestsLonger) {
  EXPECT_TRUE(ContinuingClassOutlivesNewerOneOff(6'000));
  // Without the credit, recency decides: the older conversation goes first.
  EXPECT_FALSE(ContinuingClassOutlivesNewerOneOff(0));
}

TEST(BlockIndexTest, CreateRejectsNegativeConversationCredit) {
  BlockIndexOptions options;
  options.capacity_bytes = 10;
  options.conversation_credit_ticks = -1;
  EXPECT_EQ(BlockIndex::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::cachesvc
