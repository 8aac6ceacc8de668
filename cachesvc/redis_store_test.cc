// Tests of the Redis block store and session store against a real redis-server.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "cache/block_record.h"
#include "cachesvc/redis_block_store.h"
#include "cachesvc/redis_client.h"
#include "cachesvc/redis_session_store.h"
#include "cachesvc/session_encoding.h"
#include "cachesvc/testing/block_chain.h"
#include "cachesvc/testing/redis_server.h"
#include "cachesvc/testing/session_store_conformance.h"

namespace kvserve::cachesvc {
namespace {

using testing::BlockChain;
using testing::MakeChain;

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::RedisServer::BinaryExists()) {
      GTEST_SKIP() << testing::kRedisServerBinary
                   << " is absent (Debian package redis-server): Redis tests skipped";
    }
    ASSERT_TRUE(server_.Start().ok());
    RedisOptions options;
    options.port = server_.port();
    client_ = *RedisClient::Create(options);
    blocks_ = *RedisBlockStore::Create(client_, {});
    sessions_ = *RedisSessionStore::Create(client_, {});
  }

  // Overwrites a key's value behind the stores' back.
  void RawSet(const std::string& key, const std::string& value) {
    auto reply = client_->Run({"SET", key, value});
    ASSERT_TRUE(reply.ok());
  }
  bool RawExists(const std::string& key) {
    auto reply = client_->Run({"EXISTS", key});
    return reply.ok() && (*reply)->integer == 1;
  }

  testing::RedisServer server_;
  std::shared_ptr<RedisClient> client_;
  std::unique_ptr<RedisBlockStore> blocks_;
  std::unique_ptr<RedisSessionStore> sessions_;
};

void PutChain(BlockStore& store, const BlockChain& chain) {
  for (size_t i = 0; i < chain.hashes.size(); ++i) {
    ASSERT_EQ(
        *store.Put({chain.partition, chain.hashes[i]}, chain.parent(i), chain.record(i), kNow),
        PutOutcome::kStored);
  }
}

TEST(RedisAddressTest, Parses) {
  RedisOptions o;
  ASSERT_TRUE(ParseRedisAddress("cache.local:6380", &o).ok());
  EXPECT_EQ(o.host, "cache.local");
  EXPECT_EQ(o.port, 6380);
  ASSERT_TRUE(ParseRedisAddress("[::1]:7000", &o).ok());
  EXPECT_EQ(o.host, "::1");
  EXPECT_EQ(o.port, 7000);
  for (const char* bad :
       {"", "host", ":6379", "host:", "host:0", "host:65536", "host:12x", "[::1]6379", "[::1"}) {
    EXPECT_EQ(ParseRedisAddress(bad, &o).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(RedisStoreTest, RoundTrip) {
  const BlockChain chain = MakeChain(3, "a");
  PutChain(*blocks_, chain);
  EXPECT_EQ(
      *blocks_->Put({chain.partition, chain.hashes[1]}, chain.parent(1), chain.record(1), kNow),
      PutOutcome::kAlreadyPresent);
  for (size_t i = 0; i < 3; ++i) {
    absl::StatusOr<RecordPtr> got = blocks_->Get({chain.partition, chain.hashes[i]}, kNow);
    ASSERT_TRUE(got.ok());
    ASSERT_NE(*got, nullptr);
    EXPECT_EQ(**got, chain.records[i]);
  }
  const BlockChain other = MakeChain(1, "a", /*seed=*/9);
  EXPECT_EQ(*blocks_->Get({chain.partition, other.hashes[0]}, kNow), nullptr);
  EXPECT_TRUE(RawExists(RedisBlockKey(chain.partition, chain.hashes[0])));
  EXPECT_EQ(blocks_->name(), "redis");
  EXPECT_GE(blocks_->stats().blocks, 3);
}

TEST_F(RedisStoreTest, LookupReportsTheUnbrokenPrefixOfItsPartition) {
  const BlockChain chain = MakeChain(5, "a");
  for (size_t i : {0, 1, 3, 4}) {
    ASSERT_EQ(
        *blocks_->Put({chain.partition, chain.hashes[i]}, chain.parent(i), chain.record(i), kNow),
        PutOutcome::kStored);
  }
  absl::StatusOr<LookupResult> r = blocks_->Lookup(chain.partition, chain.hashes, kNow);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->present_blocks, 2);
  EXPECT_EQ(r->present_bytes, static_cast<int64_t>(2 * chain.records[0].size()));
  EXPECT_EQ(blocks_->Lookup(chain.partition, {}, kNow)->present_blocks, 0);
  // The same keys under another partition (another salt) are not there.
  const BlockChain salted = MakeChain(1, "b");
  EXPECT_EQ(blocks_->Lookup(salted.partition, chain.hashes, kNow)->present_blocks, 0);
  EXPECT_EQ(*blocks_->Get({salted.partition, chain.hashes[0]}, kNow), nullptr);
}

TEST_F(RedisStoreTest, CorruptValuesAreMissesAndDeleted) {
  const BlockChain chain = MakeChain(3, "a");
  PutChain(*blocks_, chain);
  // A flipped payload byte, a truncated value, another block's record under this key.
  std::string flipped = chain.records[0];
  flipped[flipped.size() - 3] ^= 0x10;
  RawSet(RedisBlockKey(chain.partition, chain.hashes[0]), flipped);
  RawSet(RedisBlockKey(chain.partition, chain.hashes[1]), chain.records[1].substr(0, 200));
  RawSet(RedisBlockKey(chain.partition, chain.hashes[2]), chain.records[1]);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(*blocks_->Get({chain.partition, chain.hashes[i]}, kNow), nullptr) << i;
    EXPECT_FALSE(RawExists(RedisBlockKey(chain.partition, chain.hashes[i]))) << i;
  }
  const BlockStoreStats stats = blocks_->stats();
  auto count = [&](const std::string& reason) {
    for (const auto& [r, n] : stats.evictions) {
      if (r == reason) return n;
    }
    return int64_t{0};
  };
  EXPECT_EQ(count("corrupt_bad_checksum"), 1);
  EXPECT_EQ(count("corrupt_truncated"), 1);
  EXPECT_EQ(count("corrupt_wrong_hash"), 1);
  EXPECT_EQ(blocks_->Lookup(chain.partition, chain.hashes, kNow)->present_blocks, 0);
}

StoredSession MakeSession(const std::string& id, const BlockHash& partition) {
  StoredSession s;
  s.id = id;
  s.partition = partition;
  s.tokens = {1, 2, 3, 4, 5};
  s.turn_ends = {2, 5};
  s.has_head = true;
  s.head = BlockHash{7, 8};
  s.owner = "replica-1";
  return s;
}

TEST(SessionValueTest, RoundTripsAndRejectsDamage) {
  const StoredSession s = MakeSession("x", BlockHash{1, 2});
  const std::string value = EncodeSessionValue(s);
  StoredSession back;
  ASSERT_TRUE(DecodeSessionValue(value, &back));
  EXPECT_EQ(back.partition, s.partition);
  EXPECT_EQ(back.tokens, s.tokens);
  EXPECT_EQ(back.turn_ends, s.turn_ends);
  EXPECT_TRUE(back.has_head);
  EXPECT_EQ(back.head, s.head);
  EXPECT_EQ(back.owner, s.owner);
  for (size_t n = 0; n < value.size(); ++n) {
    EXPECT_FALSE(DecodeSessionValue(value.substr(0, n), &back)) << n;
  }
  EXPECT_FALSE(DecodeSessionValue(value + "x", &back));
  std::string huge_count = value;
  huge_count[41 + s.owner.size()] = '\xff';  // token count far beyond the value
  EXPECT_FALSE(DecodeSessionValue(huge_count, &back));
}

TEST_F(RedisStoreTest, SessionsRoundTripAndExpire) {
  const BlockHash partition{1, 2};
  StoredSession s = MakeSession("conv-1", partition);
  s.expires_at = kNow + absl::Milliseconds(150);
  ASSERT_TRUE(sessions_->Put(s, kNow).ok());
  absl::StatusOr<StoredSession> got = sessions_->Get("conv-1", kNow);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->id, "conv-1");
  EXPECT_EQ(got->tokens, s.tokens);
  EXPECT_EQ(got->turn_ends, s.turn_ends);
  EXPECT_EQ(got->head, s.head);
  EXPECT_EQ(got->owner, "replica-1");
  EXPECT_GT(got->expires_at, kNow);
  EXPECT_LE(got->expires_at, kNow + absl::Milliseconds(150));
  // Redis expires the key on its own clock: wait past the TTL.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(sessions_->Get("conv-1", kNow).status().code(), absl::StatusCode::kNotFound);

  StoredSession forever = MakeSession("conv-2", partition);
  ASSERT_TRUE(sessions_->Put(forever, kNow).ok());
  EXPECT_EQ(sessions_->Get("conv-2", kNow)->expires_at, absl::InfiniteFuture());
  EXPECT_EQ(sessions_->size(), 1);
  EXPECT_TRUE(sessions_->Delete("conv-2", kNow).ok());
  EXPECT_EQ(sessions_->Delete("conv-2", kNow).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(sessions_->Get("conv-2", kNow).status().code(), absl::StatusCode::kNotFound);

  // Limits and damage.
  StoredSession long_owner = MakeSession("conv-3", partition);
  long_owner.owner.assign(257, 'o');
  EXPECT_EQ(sessions_->Put(long_owner, kNow).code(), absl::StatusCode::kResourceExhausted);
  RawSet("kvs:conv-4", "KVS1garbage");
  EXPECT_EQ(sessions_->Get("conv-4", kNow).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(sessions_->corrupt_values(), 1);
  EXPECT_FALSE(RawExists("kvs:conv-4"));
}

TEST_F(RedisStoreTest, ListPagesByPartitionInIdOrder) {
  const BlockHash a{1, 1};
  const BlockHash b{2, 2};
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(sessions_->Put(MakeSession(absl::StrCat("a", i), a), kNow).ok());
  }
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(sessions_->Put(MakeSession(absl::StrCat("b", i), b), kNow).ok());
  }
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    absl::StatusOr<SessionRecordStore::Page> page = sessions_->List(&a, 3, token, kNow);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->sessions.size(), 3u);
    for (const StoredSession& s : page->sessions) {
      EXPECT_EQ(s.partition, a);
      EXPECT_TRUE(s.tokens.empty());
      EXPECT_EQ(s.owner, "replica-1");
      seen.push_back(s.id);
    }
    token = page->next_page_token;
    ASSERT_LT(++pages, 10);
  } while (!token.empty());
  EXPECT_EQ(seen, (std::vector<std::string>{"a0", "a1", "a2", "a3", "a4", "a5", "a6"}));
  absl::StatusOr<SessionRecordStore::Page> all = sessions_->List(nullptr, 100, "", kNow);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->sessions.size(), 12u);
  EXPECT_TRUE(all->next_page_token.empty());
  EXPECT_EQ(sessions_->size(), 12);
}

// A dead or hung Redis is UNAVAILABLE within the timeout, never a hang; the stores
// recover by themselves once it is back.
TEST_F(RedisStoreTest, ServerLossIsUnavailableAndRecovers) {
  const BlockChain chain = MakeChain(2, "a");
  PutChain(*blocks_, chain);
  const auto expect_unavailable_fast = [&](const char* what) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(blocks_->Lookup(chain.partition, chain.hashes, kNow).status().code(),
              absl::StatusCode::kUnavailable)
        << what;
    EXPECT_EQ(blocks_->Get({chain.partition, chain.hashes[0]}, kNow).status().code(),
              absl::StatusCode::kUnavailable)
        << what;
    EXPECT_EQ(
        blocks_->Put({chain.partition, chain.hashes[0]}, chain.parent(0), chain.record(0), kNow)
            .status()
            .code(),
        absl::StatusCode::kUnavailable)
        << what;
    EXPECT_EQ(sessions_->Get("s", kNow).status().code(), absl::StatusCode::kUnavailable) << what;
    EXPECT_EQ(sessions_->List(nullptr, 10, "", kNow).status().code(),
              absl::StatusCode::kUnavailable)
        << what;
    // Five calls, each bounded by a 200 ms timeout per connect or socket wait.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << what;
  };
  server_.Pause();
  expect_unavailable_fast("hung server");
  server_.Resume();
  server_.Stop();
  expect_unavailable_fast("dead server");
  ASSERT_TRUE(server_.Start().ok());
  // No persistence: the restarted server is empty, and the stores work again.
  EXPECT_EQ(blocks_->Lookup(chain.partition, chain.hashes, kNow)->present_blocks, 0);
  PutChain(*blocks_, chain);
  EXPECT_EQ(blocks_->Lookup(chain.partition, chain.hashes, kNow)->present_blocks, 2);
  EXPECT_TRUE(sessions_->Put(MakeSession("s", BlockHash{1, 1}), kNow).ok());
  EXPECT_TRUE(sessions_->Get("s", kNow).ok());
}

TEST_F(RedisStoreTest, SessionUpdateIsACompareAndSetKeepingVersionsLeasesAndTombstones) {
  testing::CheckUpdateBasics(*sessions_, kNow);
}

TEST_F(RedisStoreTest, SessionTombstonesAreRecordsButNotListedOrCounted) {
  testing::CheckTombstonesAndExpiry(*sessions_, kNow, /*clock_expires=*/false);
}

TEST_F(RedisStoreTest, ConcurrentSessionCasHasExactlyOneWinner) {
  testing::CheckConcurrentCasHasOneWinner(*sessions_, kNow);
}

// Two stores over one Redis stand for two kvserve-cache processes: the optimistic write
// of each sees the other's, so racing compare-and-sets still have one winner, and the
// loser's read-modify-write retries from the newer value.
TEST_F(RedisStoreTest, StoresOfSeveralProcessesSharingOneRedisStayAtomic) {
  RedisOptions options;
  options.port = server_.port();
  std::shared_ptr<RedisClient> other_client = *RedisClient::Create(options);
  std::unique_ptr<RedisSessionStore> other = *RedisSessionStore::Create(other_client, {});
  ASSERT_TRUE(sessions_->Update("race", testing::CasTo(0, "first", kNow), kNow).ok());
  // Counter updates (read version, write version + 1) from both stores, many threads:
  // no increment is lost.
  constexpr int kThreads = 8;
  constexpr int kIncrements = 25;
  std::vector<std::thread> threads;
  std::atomic<int> aborted{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RedisSessionStore& store = t % 2 == 0 ? *sessions_ : *other;
      for (int i = 0; i < kIncrements; ++i) {
        for (;;) {
          absl::StatusOr<SessionUpdate> u = store.Update(
              "race",
              [](std::optional<StoredSession>& r) -> absl::StatusOr<bool> {
                ++r->version;
                return true;
              },
              kNow);
          if (u.ok()) break;
          ASSERT_EQ(u.status().code(), absl::StatusCode::kAborted) << u.status();
          aborted.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(sessions_->Get("race", kNow)->version, 1 + kThreads * kIncrements);
  EXPECT_GT(sessions_->update_conflicts() + other->update_conflicts(), 0);
}

TEST_F(RedisStoreTest, OldSessionValuesReadAsVersionOneWithoutALease) {
  StoredSession s = testing::ConformanceSession("old", 1, kNow);
  s.tenant.clear();
  // A version 1 value as servers before versions wrote it: magic, partition, has_head,
  // head, owner, tokens, turn ends.
  std::string v1 = "KVS1";
  v1 += cache::HashToBytes(s.partition);
  v1.push_back(1);
  v1 += cache::HashToBytes(s.head);
  auto u32 = [&](uint32_t v) { v1.append(reinterpret_cast<const char*>(&v), 4); };
  u32(static_cast<uint32_t>(s.owner.size()));
  v1 += s.owner;
  u32(4);
  for (int32_t t : s.tokens) v1.append(reinterpret_cast<const char*>(&t), 4);
  u32(2);
  for (int32_t t : s.turn_ends) v1.append(reinterpret_cast<const char*>(&t), 4);
  RawSet("kvs:old", v1);
  absl::StatusOr<StoredSession> got = sessions_->Get("old", kNow);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version, 1);
  EXPECT_FALSE(got->closed);
  EXPECT_TRUE(got->lease_holder.empty());
  EXPECT_EQ(got->tokens, s.tokens);
  // A compare-and-set over it writes version 3 encoding.
  ASSERT_TRUE(sessions_->Update("old", testing::CasTo(1, "new", kNow), kNow).ok());
  EXPECT_EQ(sessions_->Get("old", kNow)->version, 2);
}

}  // namespace
}  // namespace kvserve::cachesvc
