// The contract of SessionRecordStore::Update and of the stored session fields (version,
// tombstone, lease), checked the same way on every store (memory, disk, Redis): each
// store's test calls these on a fresh, empty store. Test-only.
#ifndef KVSERVE_CACHESVC_TESTING_SESSION_STORE_CONFORMANCE_H_
#define KVSERVE_CACHESVC_TESTING_SESSION_STORE_CONFORMANCE_H_

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cachesvc/block_store.h"
#include "gtest/gtest.h"

namespace kvserve::cachesvc::testing {

inline StoredSession ConformanceSession(const std::string& id, int64_t version, absl::Time now) {
  StoredSession s;
  s.id = id;
  s.partition = BlockHash{7, 8};
  s.tokens = {1, 2, 3, 4};
  s.turn_ends = {2, 4};
  s.has_head = true;
  s.head = BlockHash{9, 10};
  s.owner = "replica-a";
  s.tenant = "alice";
  s.version = version;
  s.expires_at = now + absl::Hours(1);
  return s;
}

// A compare-and-set on the version, as the service writes one: `expected` (0: absent)
// becomes `expected` + 1 with `owner`; ABORTED otherwise.
inline SessionMutation CasTo(int64_t expected, const std::string& owner, absl::Time now) {
  return [expected, owner, now](std::optional<StoredSession>& r) -> absl::StatusOr<bool> {
    const int64_t version = r.has_value() ? r->version : 0;
    if (version != expected) return absl::AbortedError(absl::StrCat("at version ", version));
    StoredSession next = ConformanceSession("ignored: the store sets the id", version + 1, now);
    next.owner = owner;
    r = std::move(next);
    return true;
  };
}

// Update: creates, replaces, declines, fails and deletes; the written record's id is the
// one updated; every field (version, lease, tombstone) survives a read back.
inline void CheckUpdateBasics(SessionRecordStore& store, absl::Time now) {
  absl::StatusOr<SessionUpdate> u = store.Update("s", CasTo(0, "a", now), now);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_TRUE(u->written);
  ASSERT_TRUE(u->record.has_value());
  EXPECT_EQ(u->record->id, "s");
  EXPECT_EQ(u->record->version, 1);
  absl::StatusOr<StoredSession> got = store.Get("s", now);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->id, "s");
  EXPECT_EQ(got->version, 1);
  EXPECT_EQ(got->tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(got->tenant, "alice");

  // The version check: a stale expectation fails and writes nothing.
  u = store.Update("s", CasTo(0, "b", now), now);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store.Get("s", now)->owner, "a");
  u = store.Update("s", CasTo(1, "b", now), now);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(store.Get("s", now)->version, 2);
  EXPECT_EQ(store.Get("s", now)->owner, "b");

  // Declining leaves the store as it was and returns the record.
  u = store.Update(
      "s", [](std::optional<StoredSession>&) -> absl::StatusOr<bool> { return false; }, now);
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->written);
  ASSERT_TRUE(u->record.has_value());
  EXPECT_EQ(u->record->version, 2);
  EXPECT_EQ(store.Get("s", now)->version, 2);

  // A lease persists with its absolute deadline; a lease change keeps the version.
  u = store.Update(
      "s",
      [now](std::optional<StoredSession>& r) -> absl::StatusOr<bool> {
        r->lease_holder = "turn-1";
        r->lease_expires_at = now + absl::Seconds(30);
        return true;
      },
      now);
  ASSERT_TRUE(u.ok()) << u.status();
  got = store.Get("s", now);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->lease_holder, "turn-1");
  EXPECT_EQ(got->lease_expires_at, now + absl::Seconds(30));
  EXPECT_TRUE(got->HasLiveLease(now));
  EXPECT_FALSE(got->HasLiveLease(now + absl::Seconds(30)));
  EXPECT_EQ(got->version, 2);

  // An update of an absent id sees nothing; deleting through Update removes the record.
  u = store.Update(
      "never",
      [](std::optional<StoredSession>& r) -> absl::StatusOr<bool> {
        EXPECT_FALSE(r.has_value());
        return absl::NotFoundError("none");
      },
      now);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Get("never", now).status().code(), absl::StatusCode::kNotFound);
  u = store.Update(
      "s",
      [](std::optional<StoredSession>& r) -> absl::StatusOr<bool> {
        r.reset();
        return true;
      },
      now);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(store.Get("s", now).status().code(), absl::StatusCode::kNotFound);
}

// A tombstone is a record to Get and Update (never "absent"), but List and size() leave
// it out; an expired record is absent to Update (checked when `clock_expires`: stores
// that expire on their own clock, like Redis, do not follow `now`).
inline void CheckTombstonesAndExpiry(SessionRecordStore& store, absl::Time now,
                                     bool clock_expires = true) {
  ASSERT_TRUE(store.Update("live", CasTo(0, "a", now), now).ok());
  ASSERT_TRUE(store.Update("closed", CasTo(0, "a", now), now).ok());
  absl::StatusOr<SessionUpdate> u = store.Update(
      "closed",
      [now](std::optional<StoredSession>& r) -> absl::StatusOr<bool> {
        StoredSession t;
        t.closed = true;
        t.version = r->version + 1;
        t.partition = r->partition;
        t.expires_at = now + absl::Hours(24);
        r = std::move(t);
        return true;
      },
      now);
  ASSERT_TRUE(u.ok()) << u.status();
  absl::StatusOr<StoredSession> got = store.Get("closed", now);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->closed);
  EXPECT_EQ(got->version, 2);
  EXPECT_TRUE(got->tokens.empty());
  EXPECT_EQ(store.Update("closed", CasTo(0, "b", now), now).status().code(),
            absl::StatusCode::kAborted);  // not absent
  EXPECT_EQ(store.size(), 1);
  absl::StatusOr<SessionRecordStore::Page> page = store.List(nullptr, 100, "", now);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->sessions.size(), 1u);
  EXPECT_EQ(page->sessions[0].id, "live");
  EXPECT_EQ(page->sessions[0].version, 1);

  if (!clock_expires) return;
  // Expired: absent to Update (a put over version 0 succeeds).
  StoredSession brief = ConformanceSession("brief", 3, now);
  brief.expires_at = now + absl::Seconds(5);
  ASSERT_TRUE(store.Put(brief, now).ok());
  const absl::Time later = now + absl::Seconds(6);
  u = store.Update("brief", CasTo(0, "c", later), later);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(store.Get("brief", later)->version, 1);
}

// `threads` writers race one compare-and-set from version 1: exactly one wins, and the
// record is the winner's.
inline void CheckConcurrentCasHasOneWinner(SessionRecordStore& store, absl::Time now,
                                           int threads = 8) {
  ASSERT_TRUE(store.Update("race", CasTo(0, "first", now), now).ok());
  std::atomic<int> ready{0};
  std::vector<absl::Status> results(threads);
  std::vector<std::thread> writers;
  for (int t = 0; t < threads; ++t) {
    writers.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      results[t] = store.Update("race", CasTo(1, absl::StrCat("w", t), now), now).status();
    });
  }
  for (std::thread& w : writers) w.join();
  int wins = 0;
  std::string winner;
  for (int t = 0; t < threads; ++t) {
    if (results[t].ok()) {
      ++wins;
      winner = absl::StrCat("w", t);
    } else {
      EXPECT_EQ(results[t].code(), absl::StatusCode::kAborted) << results[t];
    }
  }
  EXPECT_EQ(wins, 1);
  absl::StatusOr<StoredSession> got = store.Get("race", now);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->version, 2);
  EXPECT_EQ(got->owner, winner);
}

}  // namespace kvserve::cachesvc::testing

#endif  // KVSERVE_CACHESVC_TESTING_SESSION_STORE_CONFORMANCE_H_
