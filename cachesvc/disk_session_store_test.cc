#include "cachesvc/disk_session_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cachesvc/testing/session_store_conformance.h"
#include "common/testing/fake_clock.h"

namespace kvserve::cachesvc {
namespace {

namespace fs = std::filesystem;

StoredSession Session(const std::string& id, uint64_t partition, absl::Time expires_at) {
  StoredSession s;
  s.id = id;
  s.partition = BlockHash{partition, 0};
  s.tokens = {1, 2, 3, 4, 5};
  s.turn_ends = {2, 5};
  s.has_head = true;
  s.head = BlockHash{7, partition};
  s.owner = "replica-1";
  s.expires_at = expires_at;
  return s;
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Names of the regular files in `dir`, sorted.
std::vector<std::string> Files(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class DiskSessionStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("kvserve_dsess_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    dir_ = root_ / "sessions";
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<DiskSessionStore> Open(int64_t max_records = 100) {
    absl::StatusOr<std::unique_ptr<DiskSessionStore>> store =
        DiskSessionStore::Create({.dir = dir_.string(), .max_records = max_records}, clock_.Now());
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
  absl::Time In(absl::Duration d) const { return clock_.Now() + d; }

  fs::path root_;
  fs::path dir_;
  common::testing::FakeClock clock_;
};

TEST_F(DiskSessionStoreTest, PutGetReplaceDelete) {
  auto store = Open();
  ASSERT_TRUE(store->Put(Session("a", 1, In(absl::Hours(1))), clock_.Now()).ok());
  absl::StatusOr<StoredSession> got = store->Get("a", clock_.Now());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->id, "a");
  EXPECT_EQ(got->partition, (BlockHash{1, 0}));
  EXPECT_EQ(got->tokens, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(got->turn_ends, (std::vector<int32_t>{2, 5}));
  EXPECT_TRUE(got->has_head);
  EXPECT_EQ(got->head, (BlockHash{7, 1}));
  EXPECT_EQ(got->owner, "replica-1");
  EXPECT_EQ(got->expires_at, In(absl::Hours(1)));  // nanosecond-exact

  StoredSession longer = Session("a", 2, absl::InfiniteFuture());
  longer.tokens = {9, 9, 9, 9, 9, 9, 9};
  longer.turn_ends = {7};
  longer.has_head = false;
  ASSERT_TRUE(store->Put(longer, clock_.Now()).ok());
  got = store->Get("a", clock_.Now());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->tokens, longer.tokens);
  EXPECT_FALSE(got->has_head);
  EXPECT_EQ(got->expires_at, absl::InfiniteFuture());
  EXPECT_EQ(store->size(), 1);

  EXPECT_EQ(store->Delete("b", clock_.Now()).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->Delete("a", clock_.Now()).ok());
  EXPECT_EQ(store->Get("a", clock_.Now()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Files(dir_).empty());
  EXPECT_EQ(store->Put(Session("", 1, In(absl::Hours(1))), clock_.Now()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DiskSessionStoreTest, ListPagesByIdAndFiltersByPartition) {
  auto store = Open();
  for (const char* id : {"e", "a", "d", "b", "c"}) {
    ASSERT_TRUE(
        store->Put(Session(id, id[0] == 'd' ? 2 : 1, In(absl::Hours(1))), clock_.Now()).ok());
  }
  ASSERT_TRUE(store->Put(Session("bb", 1, In(absl::Seconds(1))), clock_.Now()).ok());
  clock_.Advance(absl::Seconds(2));  // "bb" expired: never listed
  std::vector<std::string> ids;
  std::string token;
  int pages = 0;
  do {
    absl::StatusOr<SessionRecordStore::Page> page = store->List(nullptr, 2, token, clock_.Now());
    ASSERT_TRUE(page.ok());
    for (const StoredSession& s : page->sessions) {
      EXPECT_TRUE(s.tokens.empty());
      EXPECT_EQ(s.owner, "replica-1");
      EXPECT_TRUE(s.has_head);
      ids.push_back(s.id);
    }
    token = page->next_page_token;
    ++pages;
  } while (!token.empty());
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(pages, 3);
  const BlockHash two{2, 0};
  absl::StatusOr<SessionRecordStore::Page> page = store->List(&two, 10, "", clock_.Now());
  ASSERT_EQ(page->sessions.size(), 1u);
  EXPECT_EQ(page->sessions[0].id, "d");
  EXPECT_EQ(page->sessions[0].head, (BlockHash{7, 2}));
  EXPECT_TRUE(page->next_page_token.empty());
}

TEST_F(DiskSessionStoreTest, ExpiryOnTheInjectedClockDeletesFilesLazily) {
  auto store = Open();
  ASSERT_TRUE(store->Put(Session("short", 1, In(absl::Seconds(10))), clock_.Now()).ok());
  ASSERT_TRUE(store->Put(Session("long", 1, In(absl::Hours(1))), clock_.Now()).ok());
  clock_.Advance(absl::Seconds(9));
  EXPECT_TRUE(store->Get("short", clock_.Now()).ok());
  clock_.Advance(absl::Seconds(1));  // expires_at is exclusive
  EXPECT_EQ(store->Get("short", clock_.Now()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->dropped("expired"), 1);
  EXPECT_FALSE(fs::exists(store->FilePath("short")));
  EXPECT_TRUE(fs::exists(store->FilePath("long")));

  // A Put deletes whatever expired before it.
  ASSERT_TRUE(store->Put(Session("other", 1, In(absl::Seconds(5))), clock_.Now()).ok());
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(store->Put(Session("third", 1, In(absl::Hours(1))), clock_.Now()).ok());
  EXPECT_FALSE(fs::exists(store->FilePath("other")));
  EXPECT_EQ(store->dropped("expired"), 2);
  // A Delete of an expired record is NOT_FOUND and removes it.
  ASSERT_TRUE(store->Put(Session("gone", 1, In(absl::Seconds(1))), clock_.Now()).ok());
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(store->Delete("gone", clock_.Now()).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(store->FilePath("gone")));
  // A Put already expired deletes the record.
  ASSERT_TRUE(store->Put(Session("long", 1, clock_.Now()), clock_.Now()).ok());
  EXPECT_FALSE(fs::exists(store->FilePath("long")));
  EXPECT_EQ(store->size(), 1);  // "third"
}

TEST_F(DiskSessionStoreTest, RecordLimitCountsLiveRecordsOnly) {
  auto store = Open(/*max_records=*/2);
  ASSERT_TRUE(store->Put(Session("a", 1, In(absl::Seconds(1))), clock_.Now()).ok());
  ASSERT_TRUE(store->Put(Session("b", 1, In(absl::Seconds(100))), clock_.Now()).ok());
  EXPECT_EQ(store->Put(Session("c", 1, In(absl::Seconds(100))), clock_.Now()).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(fs::exists(store->FilePath("c")));
  EXPECT_TRUE(store->Put(Session("b", 1, In(absl::Seconds(200))), clock_.Now()).ok());  // replace
  clock_.Advance(absl::Seconds(2));
  EXPECT_TRUE(store->Put(Session("c", 1, In(absl::Seconds(100))), clock_.Now()).ok());
  EXPECT_EQ(Files(dir_).size(), 2u);
}

TEST_F(DiskSessionStoreTest, ANewStoreOnTheFolderSeesTheRecordsButNotExpiredOnes) {
  {
    auto store = Open();
    ASSERT_TRUE(store->Put(Session("keep", 1, In(absl::Hours(1))), clock_.Now()).ok());
    ASSERT_TRUE(store->Put(Session("forever", 2, absl::InfiniteFuture()), clock_.Now()).ok());
    ASSERT_TRUE(store->Put(Session("old", 1, In(absl::Seconds(30))), clock_.Now()).ok());
  }
  clock_.Advance(absl::Minutes(1));
  auto store = Open();
  EXPECT_EQ(store->size(), 2);
  EXPECT_EQ(store->dropped("startup_expired"), 1);
  EXPECT_FALSE(fs::exists(store->FilePath("old")));
  absl::StatusOr<StoredSession> got = store->Get("keep", clock_.Now());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tokens, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(got->expires_at, In(absl::Minutes(59)));
  EXPECT_TRUE(store->Get("forever", clock_.Now()).ok());
  EXPECT_EQ(store->Get("old", clock_.Now()).status().code(), absl::StatusCode::kNotFound);
  // The rebuilt index answers List (summaries from the files' metadata).
  absl::StatusOr<SessionRecordStore::Page> page = store->List(nullptr, 10, "", clock_.Now());
  ASSERT_EQ(page->sessions.size(), 2u);
  EXPECT_EQ(page->sessions[0].id, "forever");
  EXPECT_EQ(page->sessions[0].partition, (BlockHash{2, 0}));
  EXPECT_EQ(page->sessions[1].id, "keep");
  EXPECT_EQ(page->sessions[1].owner, "replica-1");
}

TEST_F(DiskSessionStoreTest, CorruptOrTruncatedFilesAreMissesDeletedAndCounted) {
  auto store = Open();
  for (const char* id : {"flip", "cut", "empty", "gone"}) {
    ASSERT_TRUE(store->Put(Session(id, 1, In(absl::Hours(1))), clock_.Now()).ok());
  }
  std::string bytes = ReadAll(store->FilePath("flip"));
  bytes[bytes.size() / 2] ^= 0x40;
  WriteAll(store->FilePath("flip"), bytes);
  bytes = ReadAll(store->FilePath("cut"));
  WriteAll(store->FilePath("cut"), bytes.substr(0, bytes.size() - 3));
  WriteAll(store->FilePath("empty"), "");
  fs::remove(store->FilePath("gone"));
  for (const char* id : {"flip", "cut", "empty", "gone"}) {
    EXPECT_EQ(store->Get(id, clock_.Now()).status().code(), absl::StatusCode::kNotFound) << id;
    EXPECT_FALSE(fs::exists(store->FilePath(id))) << id;
  }
  EXPECT_EQ(store->dropped("corrupt"), 3);
  EXPECT_EQ(store->dropped("missing_file"), 1);
  EXPECT_EQ(store->size(), 0);
}

TEST_F(DiskSessionStoreTest, StartupDeletesBadFilesAndLeftoverTempFiles) {
  std::string good;
  {
    auto store = Open();
    ASSERT_TRUE(store->Put(Session("good", 1, In(absl::Hours(1))), clock_.Now()).ok());
    ASSERT_TRUE(store->Put(Session("bad", 1, In(absl::Hours(1))), clock_.Now()).ok());
    ASSERT_TRUE(store->Put(Session("moved", 1, In(absl::Hours(1))), clock_.Now()).ok());
    good = ReadAll(store->FilePath("good"));
    const std::string bad = ReadAll(store->FilePath("bad"));
    WriteAll(store->FilePath("bad"), bad.substr(0, 20));  // truncated
    // A valid file under another id's name.
    fs::rename(store->FilePath("moved"), dir_ / DiskSessionStore::FileName("other"));
  }
  WriteAll(dir_ / (DiskSessionStore::FileName("good") + ".tmp.7"), good.substr(0, 9));
  WriteAll(dir_ / "zz.kvss", "not hex, not a record");
  WriteAll(dir_ / "README", "not ours: left alone");
  fs::create_directory(dir_ / "folder.kvss");
  auto store = Open();
  EXPECT_EQ(store->size(), 1);
  EXPECT_EQ(store->dropped("startup_temp_file"), 1);
  EXPECT_EQ(store->dropped("startup_corrupt"), 2);  // "bad" and "zz.kvss"
  EXPECT_EQ(store->dropped("startup_name_mismatch"), 1);
  EXPECT_EQ(Files(dir_), (std::vector<std::string>{DiskSessionStore::FileName("good"), "README"}));
  EXPECT_TRUE(fs::is_directory(dir_ / "folder.kvss"));
  EXPECT_TRUE(store->Get("good", clock_.Now()).ok());
}

TEST_F(DiskSessionStoreTest, HostileIdsStayInTheFolder) {
  auto store = Open();
  const std::string very_long(4096, '/');
  const std::vector<std::string> ids = {"../x",
                                        "a/b",
                                        "..",
                                        ".",
                                        "/etc/passwd",
                                        std::string("nul\0byte", 8),
                                        "\xff\xfe",
                                        std::string(DiskSessionStore::kMaxHexIdBytes, 'a'),
                                        std::string(DiskSessionStore::kMaxHexIdBytes + 1, 'a'),
                                        very_long};
  for (const std::string& id : ids) {
    const std::string name = DiskSessionStore::FileName(id);
    EXPECT_LE(name.size(), 255u);
    EXPECT_EQ(name.find('/'), std::string::npos);
    EXPECT_NE(name[0], '.');
    ASSERT_TRUE(store->Put(Session(id, 1, In(absl::Hours(1))), clock_.Now()).ok()) << id;
  }
  EXPECT_EQ(Files(dir_).size(), ids.size());
  EXPECT_EQ(Files(root_).size(), 0u);  // nothing escaped into the parent
  auto reopened = Open();
  EXPECT_EQ(reopened->size(), static_cast<int64_t>(ids.size()));
  for (const std::string& id : ids) {
    absl::StatusOr<StoredSession> got = reopened->Get(id, clock_.Now());
    ASSERT_TRUE(got.ok()) << id;
    EXPECT_EQ(got->id, id);
  }
  EXPECT_EQ(reopened->Get(std::string(4095, '/'), clock_.Now()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(reopened->Delete(very_long, clock_.Now()).ok());
  EXPECT_EQ(Files(dir_).size(), ids.size() - 1);
}

TEST_F(DiskSessionStoreTest, FileDecodingRejectsEveryDamage) {
  const std::string bytes = EncodeSessionFile(Session("x", 1, In(absl::Hours(1))));
  StoredSession back;
  ASSERT_TRUE(DecodeSessionFile(bytes, &back));
  EXPECT_EQ(back.id, "x");
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeSessionFile(bytes.substr(0, n), &back)) << n;
  }
  EXPECT_FALSE(DecodeSessionFile(bytes + "x", &back));
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] ^= 0x01;
    EXPECT_FALSE(DecodeSessionFile(flipped, &back)) << i;
  }
}

TEST_F(DiskSessionStoreTest, ConcurrentPutsAndGetsOfOneIdSeeWholeRecords) {
  auto store = Open();
  const absl::Time now = clock_.Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        StoredSession s = Session("shared", 1, now + absl::Hours(1));
        s.tokens.assign(10 + t, t);
        s.turn_ends = {10 + t};
        ASSERT_TRUE(store->Put(s, now).ok());
        absl::StatusOr<StoredSession> got = store->Get("shared", now);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(got->turn_ends.size(), 1u);
        EXPECT_EQ(got->tokens.size(), static_cast<size_t>(got->turn_ends[0]));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(store->dropped("corrupt"), 0);
  EXPECT_EQ(Files(dir_).size(), 1u);
}

TEST_F(DiskSessionStoreTest, UpdateIsACompareAndSetKeepingVersionsLeasesAndTombstones) {
  auto store = Open();
  cachesvc::testing::CheckUpdateBasics(*store, clock_.Now());
}

TEST_F(DiskSessionStoreTest, TombstonesAreRecordsButNotListedOrCounted) {
  auto store = Open();
  cachesvc::testing::CheckTombstonesAndExpiry(*store, clock_.Now());
}

TEST_F(DiskSessionStoreTest, ConcurrentCasHasExactlyOneWinner) {
  auto store = Open();
  cachesvc::testing::CheckConcurrentCasHasOneWinner(*store, clock_.Now());
}

TEST_F(DiskSessionStoreTest, VersionsLeasesAndTombstonesSurviveANewStoreOnTheFolder) {
  const absl::Time now = clock_.Now();
  {
    auto store = Open();
    StoredSession leased = cachesvc::testing::ConformanceSession("leased", 5, now);
    leased.lease_holder = "turn-9";
    leased.lease_expires_at = now + absl::Seconds(30);
    ASSERT_TRUE(store->Put(leased, now).ok());
    StoredSession tombstone;
    tombstone.id = "closed";
    tombstone.closed = true;
    tombstone.version = 3;
    tombstone.expires_at = now + absl::Hours(24);
    ASSERT_TRUE(store->Put(tombstone, now).ok());
  }
  auto store = Open();
  EXPECT_EQ(store->size(), 1);  // the tombstone is not counted
  absl::StatusOr<StoredSession> got = store->Get("leased", now);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version, 5);
  EXPECT_EQ(got->lease_holder, "turn-9");
  EXPECT_EQ(got->lease_expires_at, now + absl::Seconds(30));
  got = store->Get("closed", now);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->closed);
  EXPECT_EQ(got->version, 3);
  absl::StatusOr<SessionRecordStore::Page> page = store->List(nullptr, 10, "", now);
  ASSERT_EQ(page->sessions.size(), 1u);
  EXPECT_EQ(page->sessions[0].id, "leased");
  EXPECT_EQ(page->sessions[0].version, 5);
}

}  // namespace
}  // namespace kvserve::cachesvc
