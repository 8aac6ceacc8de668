#include "cachesvc/memory_session_store.h"

#include "cachesvc/testing/session_store_conformance.h"
#include "gtest/gtest.h"

namespace kvserve::cachesvc {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

StoredSession Session(const std::string& id, uint64_t partition, absl::Time expires_at) {
  StoredSession s;
  s.id = id;
  s.partition = BlockHash{partition, 0};
  s.tokens = {1, 2, 3};
  s.turn_ends = {3};
  s.expires_at = expires_at;
  return s;
}

TEST(MemorySessionStoreTest, PutGetDeleteAndExpiry) {
  MemorySessionStore store({});
  ASSERT_TRUE(store.Put(Session("a", 1, kNow + absl::Seconds(10)), kNow).ok());
  absl::StatusOr<StoredSession> got = store.Get("a", kNow);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(store.Get("a", kNow + absl::Seconds(10)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Delete("b", kNow).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.Delete("a", kNow).ok());
  EXPECT_EQ(store.Get("a", kNow).status().code(), absl::StatusCode::kNotFound);
}

TEST(MemorySessionStoreTest, RecordLimitCountsLiveRecordsOnly) {
  MemorySessionStore store({.max_records = 2});
  ASSERT_TRUE(store.Put(Session("a", 1, kNow + absl::Seconds(1)), kNow).ok());
  ASSERT_TRUE(store.Put(Session("b", 1, kNow + absl::Seconds(100)), kNow).ok());
  EXPECT_EQ(store.Put(Session("c", 1, kNow + absl::Seconds(100)), kNow).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(store.Put(Session("b", 1, kNow + absl::Seconds(200)), kNow).ok());  // replace
  EXPECT_TRUE(store.Put(Session("c", 1, kNow + absl::Seconds(100)), kNow + absl::Seconds(2)).ok());
}

TEST(MemorySessionStoreTest, ListPagesByIdAndFiltersByPartition) {
  MemorySessionStore store({});
  for (const char* id : {"e", "a", "d", "b", "c"}) {
    ASSERT_TRUE(store.Put(Session(id, id[0] == 'd' ? 2 : 1, kNow + absl::Hours(1)), kNow).ok());
  }
  std::vector<std::string> ids;
  std::string token;
  do {
    absl::StatusOr<SessionRecordStore::Page> page = store.List(nullptr, 2, token, kNow);
    ASSERT_TRUE(page.ok());
    for (const StoredSession& s : page->sessions) {
      EXPECT_TRUE(s.tokens.empty());
      ids.push_back(s.id);
    }
    token = page->next_page_token;
  } while (!token.empty());
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  const BlockHash two{2, 0};
  absl::StatusOr<SessionRecordStore::Page> page = store.List(&two, 10, "", kNow);
  ASSERT_EQ(page->sessions.size(), 1u);
  EXPECT_EQ(page->sessions[0].id, "d");
}

TEST(MemorySessionStoreTest, UpdateIsACompareAndSetKeepingVersionsLeasesAndTombstones) {
  MemorySessionStore store({});
  testing::CheckUpdateBasics(store, kNow);
}

TEST(MemorySessionStoreTest, TombstonesAreRecordsButNotListedOrCounted) {
  MemorySessionStore store({});
  testing::CheckTombstonesAndExpiry(store, kNow);
}

TEST(MemorySessionStoreTest, ConcurrentCasHasExactlyOneWinner) {
  MemorySessionStore store({});
  testing::CheckConcurrentCasHasOneWinner(store, kNow);
}

}  // namespace
}  // namespace kvserve::cachesvc
