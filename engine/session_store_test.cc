#include "engine/session_store.h"

#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

SessionStore::Options Opts() {
  SessionStore::Options o;
  o.max_sessions = 3;
  o.max_session_tokens = 20;
  o.default_ttl = absl::Seconds(10);
  o.max_ttl = absl::Minutes(1);
  return o;
}

const absl::Time kT0 = absl::UnixEpoch();

TEST(SessionStoreTest, TurnsAppendHistoryOneAtATime) {
  SessionStore store(Opts());
  auto s = store.Open(absl::ZeroDuration(), "", kT0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->expires_at, kT0 + absl::Seconds(10));
  // An empty history gets the BOS (7 here) when asked.
  auto ctx = store.BeginTurn(s->id, "", {1, 2, 3}, /*bos_if_empty=*/7, kT0);
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ(ctx->context, (std::vector<int32_t>{7, 1, 2, 3}));
  EXPECT_EQ(ctx->history_tokens, 0);
  EXPECT_EQ(store.BeginTurn(s->id, "", {4}, std::nullopt, kT0).status().code(),
            absl::StatusCode::kAborted);
  // Busy sessions never expire.
  EXPECT_TRUE(store.Get(s->id, "", kT0 + absl::Hours(1)).ok());
  const std::vector<int32_t> history = {1, 2, 3, 9, 9};
  EXPECT_TRUE(store.EndTurn(s->id, &history, kT0 + absl::Hours(1)));
  // A history never gets another BOS.
  ctx = store.BeginTurn(s->id, "", {4}, /*bos_if_empty=*/7, kT0 + absl::Hours(1));
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ(ctx->context, (std::vector<int32_t>{1, 2, 3, 9, 9, 4}));
  EXPECT_EQ(ctx->history_tokens, 5);
  EXPECT_TRUE(store.EndTurn(s->id, nullptr, kT0 + absl::Hours(1)));  // cancelled: unchanged
  EXPECT_EQ(store.Get(s->id, "", kT0 + absl::Hours(1))->history_tokens, 5);
  // History limit.
  EXPECT_EQ(
      store.BeginTurn(s->id, "", std::vector<int32_t>(15, 1), std::nullopt, kT0 + absl::Hours(1))
          .status()
          .code(),
      absl::StatusCode::kResourceExhausted);
}

// A chat turn's separator (a template's end of the assistant reply: here {8, 5, 6} with
// end token 5, like DeepSeek Coder's "\n<|EOT|>\n") goes between history and the new
// tokens; when the history already ends with the end token (the model stopped on it),
// only what follows it in the separator; an empty history gets none.
TEST(SessionStoreTest, TurnSeparatorOnlyAfterHistoryAndNeverTheEndTokenTwice) {
  SessionStore store(Opts());
  auto s = store.Open(absl::ZeroDuration(), "", kT0);
  ASSERT_TRUE(s.ok());
  const std::vector<int32_t> separator = {8, 5, 6};
  auto ctx = store.BeginTurn(s->id, "", {1}, /*bos_if_empty=*/7, kT0, separator, 5);
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ(ctx->context, (std::vector<int32_t>{7, 1}));
  std::vector<int32_t> history = {7, 1, 9};  // stopped at the length limit
  EXPECT_TRUE(store.EndTurn(s->id, &history, kT0));
  ctx = store.BeginTurn(s->id, "", {3}, /*bos_if_empty=*/7, kT0, separator, 5);
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ(ctx->context, (std::vector<int32_t>{7, 1, 9, 8, 5, 6, 3}));
  history = {7, 1, 9, 8, 5, 6, 3, 9, 5};  // stopped on the end token 5
  EXPECT_TRUE(store.EndTurn(s->id, &history, kT0));
  ctx = store.BeginTurn(s->id, "", {4}, /*bos_if_empty=*/7, kT0, separator, 5);
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ(ctx->context, (std::vector<int32_t>{7, 1, 9, 8, 5, 6, 3, 9, 5, 6, 4}));
  // A history ending with another token of the separator (8, plain text) gets it all.
  history = {7, 1, 8};
  EXPECT_TRUE(store.EndTurn(s->id, &history, kT0));
  ctx = store.BeginTurn(s->id, "", {4}, /*bos_if_empty=*/7, kT0, separator, 5);
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ(ctx->context, (std::vector<int32_t>{7, 1, 8, 8, 5, 6, 4}));
}

TEST(SessionStoreTest, ForkCloseExpiryAndEvents) {
  SessionStore store(Opts());
  auto a = store.Open(absl::Seconds(5), "", kT0);
  ASSERT_TRUE(a.ok());
  const std::vector<int32_t> h = {5, 6};
  ASSERT_TRUE(store.BeginTurn(a->id, "", {5}, std::nullopt, kT0).ok());
  store.EndTurn(a->id, &h, kT0);
  auto b = store.Fork(a->id, absl::Seconds(30), "", kT0);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(a->id, b->id);
  EXPECT_EQ(b->history_tokens, 2);
  EXPECT_EQ(store.Fork("missing", absl::ZeroDuration(), "", kT0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Open(absl::Minutes(2), "", kT0).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store.Open(absl::ZeroDuration(), "", kT0).ok());
  EXPECT_EQ(store.Open(absl::ZeroDuration(), "", kT0).status().code(),
            absl::StatusCode::kResourceExhausted);
  store.ExpireIdle(kT0 + absl::Seconds(6));  // a expires, b does not
  EXPECT_EQ(store.Get(a->id, "", kT0 + absl::Seconds(6)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.Close(b->id, "", kT0 + absl::Seconds(6)).ok());
  EXPECT_EQ(store.Close(b->id, "", kT0 + absl::Seconds(6)).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(store.EndTurn(b->id, nullptr, kT0));
  const auto events = store.TakeEvents();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, SessionStore::Event::Kind::kForked);
  EXPECT_EQ(events[0].id, b->id);
  EXPECT_EQ(events[0].parent_id, a->id);
  EXPECT_EQ(events[1].kind, SessionStore::Event::Kind::kRemoved);
  EXPECT_EQ(events[1].id, a->id);
  EXPECT_EQ(events[2].id, b->id);
  EXPECT_TRUE(store.TakeEvents().empty());
  EXPECT_EQ(store.size(), 1);
}

// A session known elsewhere continues here under its own id, with its history and turn
// boundaries; ids and sizes from outside are checked.
TEST(SessionStoreTest, RestoreAdoptsARemoteSession) {
  SessionStore store(Opts());
  const std::string id = "s-0123456789abcdef0123456789abcdef";
  ASSERT_TRUE(store.Restore(id, "", {1, 2, 3, 4}, {4}, absl::Hours(5), kT0).ok());
  auto info = store.Get(id, "", kT0);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->history_tokens, 4);
  EXPECT_EQ(info->expires_at, kT0 + absl::Minutes(1));  // ttl clamped to max_ttl
  // Restoring again changes nothing.
  ASSERT_TRUE(store.Restore(id, "", {9}, {1}, absl::Seconds(10), kT0).ok());
  EXPECT_EQ(store.GetSnapshot(id)->history, (std::vector<int32_t>{1, 2, 3, 4}));
  // Turns append turn ends.
  ASSERT_TRUE(store.BeginTurn(id, "", {5}, std::nullopt, kT0).ok());
  const std::vector<int32_t> history = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(store.EndTurn(id, &history, kT0));
  EXPECT_EQ(store.GetSnapshot(id)->turn_ends, (std::vector<int32_t>{4, 6}));
  EXPECT_EQ(store.Restore("s-short", "", {}, {}, absl::ZeroDuration(), kT0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      store.Restore("s-0123456789ABCDEF0123456789abcdef", "", {}, {}, absl::ZeroDuration(), kT0)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store
                .Restore("s-1123456789abcdef0123456789abcdef", "", std::vector<int32_t>(21, 1), {},
                         absl::ZeroDuration(), kT0)
                .code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(store.GetSnapshot("s-1123456789abcdef0123456789abcdef").has_value());
}

// The session cache's record replaces the local copy (history, turn ends, version)
// whatever its version, when the copy is idle and the caller's; a record of an unknown
// id is restored; a record too long, someone else's, or arriving during a turn changes
// nothing.
TEST(SessionStoreTest, AdoptMakesTheCopyTheRecord) {
  using Outcome = SessionStore::AdoptOutcome;
  SessionStore store(Opts());
  auto s = store.Open(absl::ZeroDuration(), "alice", kT0);
  ASSERT_TRUE(s.ok());
  const std::string& id = s->id;
  const absl::Duration ttl = absl::Seconds(10);
  // Someone else's: untouched.
  EXPECT_EQ(*store.Adopt(id, "bob", {1, 2}, {2}, 3, ttl, kT0), Outcome::kUnchanged);
  // Over max_session_tokens (20).
  EXPECT_EQ(*store.Adopt(id, "alice", std::vector<int32_t>(21, 1), {21}, 3, ttl, kT0),
            Outcome::kUnchanged);
  EXPECT_TRUE(store.GetSnapshot(id)->history.empty());

  EXPECT_EQ(*store.Adopt(id, "alice", {1, 2, 3, 4}, {2, 4}, 3, ttl, kT0), Outcome::kRefreshed);
  EXPECT_EQ(store.GetSnapshot(id)->history, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(store.GetSnapshot(id)->turn_ends, (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(store.GetSnapshot(id)->version, 3);
  EXPECT_EQ(store.Get(id, "alice", kT0)->expires_at, kT0 + absl::Seconds(10));  // not touched
  // The same version again: nothing new.
  EXPECT_EQ(*store.Adopt(id, "alice", {1, 2, 3, 4}, {2, 4}, 3, ttl, kT0), Outcome::kUnchanged);
  // The next turn continues the adopted history.
  auto turn = store.BeginTurn(id, "alice", {5}, /*bos_if_empty=*/7, kT0);
  ASSERT_TRUE(turn.ok());
  EXPECT_EQ(turn->context, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  // During a turn nothing is replaced.
  EXPECT_EQ(*store.Adopt(id, "alice", {1, 2, 3, 4, 8, 8}, {2, 4, 6}, 4, ttl, kT0),
            Outcome::kUnchanged);
  const std::vector<int32_t> history = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(store.EndTurn(id, &history, kT0));
  EXPECT_EQ(store.GetSnapshot(id)->history, history);
  // An older record wins too: the record, not the copy, is the conversation (this
  // replica's last turn was not committed).
  EXPECT_EQ(*store.Adopt(id, "alice", {1, 2}, {2}, 2, ttl, kT0), Outcome::kRefreshed);
  EXPECT_EQ(store.GetSnapshot(id)->history, (std::vector<int32_t>{1, 2}));
  store.SetVersion(id, 7);
  EXPECT_EQ(store.GetSnapshot(id)->version, 7);
  // Unknown here: restored, at the record's version.
  const std::string other = "s-0123456789abcdef0123456789abcdef";
  EXPECT_EQ(*store.Adopt(other, "alice", {1}, {1}, 5, ttl, kT0), Outcome::kRestored);
  EXPECT_EQ(store.GetSnapshot(other)->version, 5);
}

// Another owner's session is exactly an unknown id: the same NOT_FOUND message from
// every method, and the session itself untouched (not expired, not closed, not busy).
TEST(SessionStoreTest, SessionsBelongToTheirOwner) {
  SessionStore store(Opts());
  auto a = store.Open(absl::Seconds(5), "alice", kT0);
  ASSERT_TRUE(a.ok());
  const std::string unknown = "s-00000000000000000000000000000000";
  const absl::Status not_found = store.Get(unknown, "bob", kT0).status();
  ASSERT_EQ(not_found.code(), absl::StatusCode::kNotFound);
  // `got` is what an unknown id gives, but for the id itself.
  auto same_as_unknown = [&](const std::string& id, const absl::Status& got) {
    EXPECT_EQ(got.code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(absl::StrReplaceAll(got.message(), {{id, unknown}}), not_found.message());
  };
  same_as_unknown(a->id, store.Get(a->id, "bob", kT0).status());
  same_as_unknown(a->id, store.Get(a->id, "", kT0).status());
  same_as_unknown(a->id, store.Fork(a->id, absl::ZeroDuration(), "bob", kT0).status());
  same_as_unknown(a->id, store.Close(a->id, "bob", kT0));
  same_as_unknown(a->id, store.BeginTurn(a->id, "bob", {1}, std::nullopt, kT0).status());
  // Even after its expiry another owner's call does not remove it (no kRemoved event).
  same_as_unknown(a->id, store.Get(a->id, "bob", kT0 + absl::Seconds(6)).status());
  EXPECT_TRUE(store.TakeEvents().empty());
  // The owner still has it, idle, with its history.
  ASSERT_TRUE(store.Get(a->id, "alice", kT0).ok());
  EXPECT_FALSE(store.Get(a->id, "alice", kT0)->busy);
  auto child = store.Fork(a->id, absl::ZeroDuration(), "alice", kT0);
  ASSERT_TRUE(child.ok());
  same_as_unknown(child->id, store.Get(child->id, "bob", kT0).status());
  EXPECT_EQ(store.GetSnapshot(child->id)->owner, "alice");
  EXPECT_TRUE(store.Close(a->id, "alice", kT0).ok());

  // A restored session belongs to the owner it is restored for.
  const std::string restored = "s-0123456789abcdef0123456789abcdef";
  ASSERT_TRUE(store.Restore(restored, "carol", {1, 2}, {2}, absl::ZeroDuration(), kT0).ok());
  EXPECT_TRUE(store.Get(restored, "carol", kT0).ok());
  same_as_unknown(restored, store.Get(restored, "alice", kT0).status());
}

TEST(SessionStoreTest, PerOwnerLimit) {
  SessionStore::Options options = Opts();
  options.max_sessions = 10;
  options.max_sessions_per_owner = 2;
  SessionStore store(options);
  auto a1 = store.Open(absl::Seconds(5), "alice", kT0);
  ASSERT_TRUE(a1.ok());
  ASSERT_TRUE(store.Open(absl::Seconds(30), "alice", kT0).ok());
  const absl::Status full = store.Open(absl::ZeroDuration(), "alice", kT0).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), ::testing::HasSubstr("max_sessions_per_tenant 2"));
  EXPECT_EQ(store.Fork(a1->id, absl::ZeroDuration(), "alice", kT0).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(
      store
          .Restore("s-0123456789abcdef0123456789abcdef", "alice", {}, {}, absl::ZeroDuration(), kT0)
          .code(),
      absl::StatusCode::kResourceExhausted);
  // Other owners, and sessions without an owner, are not affected.
  EXPECT_TRUE(store.Open(absl::ZeroDuration(), "bob", kT0).ok());
  EXPECT_TRUE(store.Open(absl::ZeroDuration(), "", kT0).ok());
  EXPECT_TRUE(store.Open(absl::ZeroDuration(), "", kT0).ok());
  EXPECT_TRUE(store.Open(absl::ZeroDuration(), "", kT0).ok());
  // Closing one, or one expiring, makes room again.
  ASSERT_TRUE(store.Close(a1->id, "alice", kT0).ok());
  auto a3 = store.Open(absl::Seconds(5), "alice", kT0);
  ASSERT_TRUE(a3.ok());
  EXPECT_EQ(store.Open(absl::ZeroDuration(), "alice", kT0).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(store.Open(absl::ZeroDuration(), "alice", kT0 + absl::Seconds(6)).ok());
}

}  // namespace
}  // namespace kvserve::engine
