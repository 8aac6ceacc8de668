// The engine with a session cache service (a shared in-process fake): conversations
// continue on another engine ("replica") and after a restart with the prefix fetched,
// bit-identical to a cold run; bad records, another salt and a dead service all end in
// recomputation, never in wrong output.
#include "engine/remote_tier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/block_record.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/testing/engine_testing.h"
#include "engine/testing/fake_remote_cache.h"
#include "engine/testing/stories_model.h"
#include "model/dtype.h"

namespace kvserve::engine {
namespace {

using testing::FakeRemoteCache;
using testing::Result;

class RemoteTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto stories = testing::LoadStories260K();
    ASSERT_TRUE(stories.ok()) << stories.status();
    stories_ = *std::move(stories);
  }

  // An engine ("replica") using the shared fake service, or none when !remote.
  std::unique_ptr<Engine> Replica(bool remote = true,
                                  const std::function<void(Engine::Options&)>& tweak = nullptr) {
    Engine::Options o;
    o.kv_budget_bytes = size_t{16} << 20;
    if (remote) {
      o.remote_cache = &service_;
      o.remote.timeout = absl::Seconds(5);
      o.remote.log = [this](std::string_view line) {
        std::lock_guard<std::mutex> lock(log_mu_);
        log_.emplace_back(line);
      };
    }
    if (tweak) tweak(o);
    auto e = testing::MakeEngine(*stories_.model, o, "cpu_blas");
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  }

  std::vector<int32_t> Encode(const std::string& text) {
    return stories_.tokenizer->Encode(text, /*add_bos=*/false);
  }

  static Request Greedy(std::vector<int32_t> prompt, int max_tokens, bool bos) {
    Request r;
    r.prompt_tokens = std::move(prompt);
    r.add_bos = bos;
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = max_tokens;
    r.sampling.top_logprobs = 3;
    return r;
  }

  // Waits until the engine wrote at least `blocks_at_least` blocks behind and no write-behind
  // job holds blocks any more (every job done or dropped).
  static void WaitStored(Engine& engine, int64_t blocks_at_least) {
    for (const absl::Time end = absl::Now() + absl::Seconds(20); absl::Now() < end;) {
      const EngineStats s = engine.Stats();
      if (s.remote.stored_blocks_total >= blocks_at_least && s.blocks_used <= s.session_blocks) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    ADD_FAILURE() << "the engine did not write its blocks behind within 20 s";
  }

  // Waits until the service's record of session `id` has `turns` turn ends; returns its
  // history.
  std::vector<int32_t> WaitRecord(const std::string& id, size_t turns) {
    for (const absl::Time end = absl::Now() + absl::Seconds(20); absl::Now() < end;) {
      auto record = service_.GetSession(id, nullptr, absl::InfiniteFuture());
      if (record.ok() && record->turn_ends.size() == turns) return record->tokens;
      absl::SleepFor(absl::Milliseconds(2));
    }
    ADD_FAILURE() << "no record of " << id << " with " << turns << " turns within 20 s";
    return {};
  }

  // The cold answer: the whole context as one stateless request on an engine without
  // a session cache, prefilled in one piece: the same tokens and logprobs, bit for bit
  // (batch invariance: however the history's K/V was computed or fetched).
  Result Cold(const std::vector<int32_t>& context, int max_tokens) {
    auto oracle = Replica(/*remote=*/false);
    return testing::RunRequest(*oracle, Greedy(context, max_tokens, /*bos=*/false));
  }

  // The same two turns on one engine without a session cache (the history's KV computed
  // exactly as the replica that wrote it computed it): the bit-exact reference.
  Result LocalContinuation(const std::vector<int32_t>& history, const std::vector<int32_t>& next,
                           int max_tokens) {
    auto local = Replica(/*remote=*/false);
    auto session = local->OpenSession(absl::ZeroDuration(), "");
    EXPECT_TRUE(session.ok());
    // history = BOS + first prompt + 60 generated tokens (FirstTurn).
    Request first = Greedy(std::vector<int32_t>(history.begin() + 1, history.end() - 60), 60,
                           /*bos=*/true);
    first.session_id = session->id;
    EXPECT_TRUE(testing::RunRequest(*local, first).status.ok());
    Request second = Greedy(next, max_tokens, /*bos=*/false);
    second.session_id = session->id;
    return testing::RunRequest(*local, second);
  }

  static void ExpectSameOutput(const Result& got, const Result& want, float tolerance = 0.0f) {
    ASSERT_TRUE(got.status.ok()) << got.status;
    EXPECT_EQ(got.tokens, want.tokens);
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t i = 0; i < got.logprobs.size(); ++i) {
      EXPECT_NEAR(got.logprobs[i], want.logprobs[i], tolerance) << i;
    }
    ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size());
    for (size_t i = 0; i < got.top_logprobs.size(); ++i) {
      ASSERT_EQ(got.top_logprobs[i].size(), want.top_logprobs[i].size());
      for (size_t j = 0; j < got.top_logprobs[i].size(); ++j) {
        EXPECT_EQ(got.top_logprobs[i][j].token, want.top_logprobs[i][j].token);
        EXPECT_NEAR(got.top_logprobs[i][j].logprob, want.top_logprobs[i][j].logprob, tolerance);
      }
    }
  }

  // Runs turn 1 of a new session on `a` (with a long first prompt, so the history has
  // many full blocks) and waits until it is written behind. Returns the session id
  // and the history. `tenant` opens and runs it.
  std::pair<std::string, std::vector<int32_t>> FirstTurn(Engine& a,
                                                         const std::string& tenant = "") {
    auto session = a.OpenSession(absl::ZeroDuration(), tenant);
    EXPECT_TRUE(session.ok());
    Request r = Greedy(Encode("Once upon a time, there was a little girl named Lily. She loved "
                              "to play outside in the sun with her big red ball."),
                       60, /*bos=*/true);
    r.session_id = session->id;
    r.tenant = tenant;
    const Result turn1 = testing::RunRequest(a, r);
    EXPECT_TRUE(turn1.status.ok()) << turn1.status;
    const int32_t history = turn1.usage.prompt_tokens + turn1.usage.completion_tokens;
    WaitStored(a, history / 16);
    auto record = service_.GetSession(session->id, nullptr, absl::InfiniteFuture());
    EXPECT_TRUE(record.ok()) << record.status();
    if (!record.ok()) return {};
    EXPECT_EQ(static_cast<int32_t>(record->tokens.size()), history);
    EXPECT_EQ(record->turn_ends, std::vector<int32_t>{history});
    EXPECT_EQ(record->tenant, tenant);
    return {session->id, record->tokens};
  }

  // Runs the next turn " The sun was warm." of session `id` (whose history is `history`)
  // on `replica`, and checks that `remote_blocks` blocks of it came from the service, the
  // rest was computed, and the answer is the cold run's.
  void ExpectNextTurnWithRemoteBlocks(Engine& replica, const std::string& id,
                                      const std::vector<int32_t>& history, int32_t remote_blocks) {
    const std::vector<int32_t> next = Encode(" The sun was warm.");
    Request turn = Greedy(next, 20, /*bos=*/false);
    turn.session_id = id;
    const Result got = testing::RunRequest(replica, turn);
    ASSERT_TRUE(got.status.ok()) << got.status;
    EXPECT_EQ(got.usage.cached_tokens_remote, remote_blocks * 16);
    EXPECT_EQ(got.usage.computed_tokens,
              static_cast<int32_t>(history.size() + next.size()) - remote_blocks * 16);
    std::vector<int32_t> context = history;
    context.insert(context.end(), next.begin(), next.end());
    ExpectSameOutput(got, Cold(context, 20));
  }

  testing::StoriesModel stories_;
  FakeRemoteCache service_;
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

TEST_F(RemoteTierTest, SessionContinuesOnAnotherReplicaAsIfComputedThere) {
  auto a = Replica();
  auto b = Replica();
  const auto [id, history] = FirstTurn(*a);
  ASSERT_FALSE(id.empty());
  EXPECT_GT(service_.blocks(), 0);

  const std::vector<int32_t> next = Encode(" Then she saw a cat.");
  Request turn2 = Greedy(next, 40, /*bos=*/true);  // BOS only applies to an empty history
  turn2.session_id = id;
  const Result got = testing::RunRequest(*b, turn2);
  ASSERT_TRUE(got.status.ok()) << got.status;
  // B had never seen the session: every full block of the history came from the service.
  const int32_t full_blocks = static_cast<int32_t>(history.size()) / 16;
  EXPECT_EQ(got.usage.cached_tokens_remote, full_blocks * 16);
  EXPECT_EQ(got.usage.cached_tokens, 0);
  EXPECT_EQ(got.usage.prompt_tokens, static_cast<int32_t>(history.size() + next.size()));
  EXPECT_EQ(b->Stats().remote.sessions_restored_total, 1);
  EXPECT_EQ(b->Stats().remote.fetched_blocks_total, full_blocks);

  // Bit-identical to the same turns on one replica and to a cold prefill of the whole
  // context.
  ExpectSameOutput(got, LocalContinuation(history, next, 40));
  std::vector<int32_t> context = history;
  context.insert(context.end(), next.begin(), next.end());
  ExpectSameOutput(got, Cold(context, 40));
}

TEST_F(RemoteTierTest, AFetchEstimatedSlowerIsSkippedUnlessAlwaysFetch) {
  auto a = Replica();
  const std::vector<int32_t> prompt = Encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside "
      "in the sun with her big red ball. One day, she went to the park with her mom.");
  ASSERT_TRUE(testing::RunRequest(*a, Greedy(prompt, 4, /*bos=*/true)).status.ok());
  WaitStored(*a, static_cast<int64_t>(prompt.size()) / 16);
  for (const bool always : {false, true}) {
    // A transfer assumed at 1 byte/s: recomputing is estimated faster, once B has an
    // estimate of its prefill (from a first request).
    auto b = Replica(/*remote=*/true, [always](Engine::Options& o) {
      o.remote.initial_bytes_per_second = 1.0;
      o.remote.always_fetch = always;
    });
    // A first prefill of >= 64 tokens (what teaches the engine its prefill speed).
    std::vector<int32_t> warm;
    for (int i = 0; i < 4; ++i) {
      const std::vector<int32_t> part = Encode(" The dog ran to the park and played with a ball.");
      warm.insert(warm.end(), part.begin(), part.end());
    }
    ASSERT_GE(warm.size(), 64u);
    ASSERT_TRUE(testing::RunRequest(*b, Greedy(warm, 2, /*bos=*/true)).status.ok());
    const Result got = testing::RunRequest(*b, Greedy(prompt, 4, /*bos=*/true));
    ASSERT_TRUE(got.status.ok()) << got.status;
    if (always) {
      EXPECT_EQ(got.usage.cached_tokens_remote, static_cast<int32_t>(prompt.size() + 1) / 16 * 16);
      EXPECT_EQ(b->Stats().remote.fetches_skipped_total, 0);
    } else {
      EXPECT_EQ(got.usage.cached_tokens_remote, 0);
      EXPECT_EQ(b->Stats().remote.fetches_skipped_total, 1);
    }
  }
}

TEST_F(RemoteTierTest, ARestartedReplicaContinuesFromTheService) {
  auto a = Replica();
  const auto [id, history] = FirstTurn(*a);
  a.reset();  // the replica restarts: its pool and sessions are gone
  a = Replica();
  Request turn2 = Greedy({}, 30, /*bos=*/false);  // continue the story as it stands
  turn2.session_id = id;
  const Result got = testing::RunRequest(*a, turn2);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_GT(got.usage.cached_tokens_remote, 0);
  ExpectSameOutput(got, LocalContinuation(history, {}, 30));
  ExpectSameOutput(got, Cold(history, 30));
}

// The record carries the session's tenant: on another replica only that tenant
// continues it; another one gets the NOT_FOUND of an unknown id from every call.
TEST_F(RemoteTierTest, OwnershipSurvivesAReplicaChange) {
  auto a = Replica();
  const auto [id, history] = FirstTurn(*a, "alice");
  ASSERT_FALSE(id.empty());
  auto b = Replica();
  const std::string unknown = "s-0123456789abcdef0123456789abcdef";
  const absl::Status not_found = b->GetSession(unknown, "bob").status();
  ASSERT_EQ(not_found.code(), absl::StatusCode::kNotFound);
  auto expect_unknown = [&](const absl::Status& got) {
    EXPECT_EQ(got.code(), absl::StatusCode::kNotFound);
    std::string message(got.message());
    if (const size_t at = message.find(id); at != std::string::npos) {
      message.replace(at, id.size(), unknown);
    }
    EXPECT_EQ(message, not_found.message());
  };
  for (const std::string& other : {std::string("bob"), std::string("")}) {
    expect_unknown(b->GetSession(id, other).status());
    expect_unknown(b->ForkSession(id, absl::ZeroDuration(), other).status());
    expect_unknown(b->CloseSession(id, other));
    Request turn = Greedy(Encode(" Then"), 5, /*bos=*/false);
    turn.session_id = id;
    turn.tenant = other;
    expect_unknown(testing::RunRequest(*b, turn).status);
  }
  EXPECT_EQ(b->Stats().remote.sessions_restored_total, 0);
  ASSERT_TRUE(service_.GetSession(id, nullptr, absl::InfiniteFuture()).ok());  // not deleted

  Request turn2 = Greedy(Encode(" Then she saw a cat."), 10, /*bos=*/false);
  turn2.session_id = id;
  turn2.tenant = "alice";
  const Result got = testing::RunRequest(*b, turn2);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_GT(got.usage.cached_tokens_remote, 0);
  EXPECT_EQ(b->Stats().remote.sessions_restored_total, 1);
}

// Records altered on the way (a changed payload byte; tokens or identity rewritten with
// an honest checksum) are rejected, counted by reason and recomputed.
TEST_F(RemoteTierTest, BadRecordsAreRejectedAndRecomputed) {
  auto a = Replica();
  const auto [id, history] = FirstTurn(*a);
  struct Case {
    std::string reason;
    std::function<void(std::string&)> tamper;
  };
  const std::vector<Case> cases = {
      {"bad_checksum", [](std::string& r) { r[r.size() - 5] ^= 0x01; }},
      {"truncated", [](std::string& r) { r.resize(r.size() - 7); }},
      {"bad_hash",
       [](std::string& r) {
         cache::BlockRecordView v;
         ASSERT_EQ(
             cache::ParseBlockRecord({reinterpret_cast<const uint8_t*>(r.data()), r.size()}, &v),
             cache::RecordCheck::kOk);
         std::vector<int32_t> tokens = v.tokens;
         tokens[3] = (tokens[3] + 1) % 512;
         const std::vector<uint8_t> payload(v.payload.begin(), v.payload.end());
         cache::EncodeBlockRecord(v.identity, v.parent, v.hash, tokens, v.layout, v.kv_heads,
                                  payload, &r);
       }},
      {"wrong_identity",
       [](std::string& r) {
         cache::BlockRecordView v;
         ASSERT_EQ(
             cache::ParseBlockRecord({reinterpret_cast<const uint8_t*>(r.data()), r.size()}, &v),
             cache::RecordCheck::kOk);
         const std::vector<uint8_t> payload(v.payload.begin(), v.payload.end());
         cache::BlockHash other = v.identity;
         other.lo ^= 1;
         cache::EncodeBlockRecord(other, v.parent, v.hash, v.tokens, v.layout, v.kv_heads, payload,
                                  &r);
       }},
  };
  const std::vector<int32_t> next = Encode(" The sun was warm.");
  // Nothing usable arrives: the replica prefills the whole context, as a cold run does.
  std::vector<int32_t> context = history;
  context.insert(context.end(), next.begin(), next.end());
  const Result want = Cold(context, 20);
  auto record = service_.GetSession(id, nullptr, absl::InfiniteFuture());
  ASSERT_TRUE(record.ok());
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    // Each case continues the session as turn 1 left it.
    ASSERT_TRUE(
        service_
            .PutSession(*record, service_.StoredSession(id)->version, "", absl::InfiniteFuture())
            .ok());
    service_.SetTamper(c.tamper);
    auto b = Replica();  // a fresh replica: nothing cached locally
    Request turn = Greedy(next, 20, /*bos=*/false);
    turn.session_id = id;
    const Result got = testing::RunRequest(*b, turn);
    ExpectSameOutput(got, want);
    EXPECT_EQ(got.usage.cached_tokens_remote, 0);
    const RemoteCacheStats s = b->Stats().remote;
    EXPECT_EQ(s.rejected_blocks_total, 1);
    // Every reason is listed (at zero until it happens); only this case's counted one.
    EXPECT_EQ(s.rejected_by_reason.size(), 9u);
    for (const auto& [reason, count] : s.rejected_by_reason) {
      EXPECT_EQ(count, reason == c.reason ? 1 : 0) << reason;
    }
    // The turn ran on b, so b holds the session now; give it back for the next case.
    b.reset();
  }
}

TEST_F(RemoteTierTest, DifferentSaltsNeverShareBlocks) {
  auto a = Replica();
  Request r = Greedy(Encode("Once upon a time, there was a big dog who liked to run and jump in "
                            "the park with his friends."),
                     20, /*bos=*/true);
  r.cache_salt = "tenant-a";
  ASSERT_TRUE(testing::RunRequest(*a, r).status.ok());
  WaitStored(*a, 1);
  auto b = Replica();
  r.cache_salt = "tenant-b";
  const Result other = testing::RunRequest(*b, r);
  ASSERT_TRUE(other.status.ok());
  EXPECT_EQ(other.usage.cached_tokens_remote, 0);
  r.cache_salt = "tenant-a";
  auto c = Replica();
  const Result same = testing::RunRequest(*c, r);
  EXPECT_GT(same.usage.cached_tokens_remote, 0);
  EXPECT_EQ(same.tokens, other.tokens);
}

// Replicas of different K/V element types share one service but nothing of each other's
// (the dtype is part of the identity every block hash starts from, of every record's layout
// and of a session record's partition): an f32 replica's session is NOT_FOUND on an f16
// replica, and a prompt the f32 replica wrote behind is recomputed there, with the f16
// replica's own cold answer.
TEST_F(RemoteTierTest, ReplicasOfDifferentKvDtypesShareNothing) {
  auto a = Replica(/*remote=*/true, [](Engine::Options& o) { o.kv_dtype = model::DType::kF32; });
  // The default, f16; fetching whatever it finds, so a miss is the dtype's, not an estimate's.
  auto b = Replica(/*remote=*/true, [](Engine::Options& o) { o.remote.always_fetch = true; });
  const auto [id, history] = FirstTurn(*a);
  ASSERT_FALSE(id.empty());
  EXPECT_GT(service_.blocks(), 0);

  Request turn2 = Greedy(Encode(" Then she saw a cat."), 20, /*bos=*/true);
  turn2.session_id = id;
  EXPECT_EQ(testing::RunRequest(*b, turn2).status.code(), absl::StatusCode::kNotFound);

  const Result got = testing::RunRequest(*b, Greedy(history, 20, /*bos=*/false));
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.usage.cached_tokens_remote, 0);
  EXPECT_EQ(b->Stats().remote.fetched_blocks_total, 0);
  ExpectSameOutput(got, Cold(history, 20));
}

// Opened on A (which keeps the empty session), continued for three turns on B: A's next
// turn sees B's whole history (the service's record has more turns than A's copy), never
// A's stale copy; then B, now behind, forks from A's newer record.
TEST_F(RemoteTierTest, AStaleLocalCopyGivesWayToTheNewerRecord) {
  auto a = Replica();
  auto b = Replica();
  auto session = a->OpenSession(absl::ZeroDuration(), "");
  ASSERT_TRUE(session.ok());
  const std::string id = session->id;
  WaitRecord(id, 0);
  for (const char* text : {"Once upon a time, there was a little girl named Lily.",
                           " She had a big red ball.", " One day, she went to the park."}) {
    Request r = Greedy(Encode(text), 12, /*bos=*/true);
    r.session_id = id;
    ASSERT_TRUE(testing::RunRequest(*b, r).status.ok());
  }
  const std::vector<int32_t> history = WaitRecord(id, 3);
  WaitStored(*b, static_cast<int64_t>(history.size()) / 16);

  const std::vector<int32_t> next = Encode(" Then she saw a cat.");
  Request turn = Greedy(next, 20, /*bos=*/true);  // BOS would mark a (wrongly) empty history
  turn.session_id = id;
  const Result got = testing::RunRequest(*a, turn);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.usage.prompt_tokens, static_cast<int32_t>(history.size() + next.size()));
  EXPECT_EQ(got.usage.cached_tokens_remote, static_cast<int32_t>(history.size()) / 16 * 16);
  EXPECT_EQ(a->Stats().remote.sessions_refreshed_total, 1);
  EXPECT_EQ(a->Stats().remote.sessions_restored_total, 0);
  std::vector<int32_t> context = history;
  context.insert(context.end(), next.begin(), next.end());
  ExpectSameOutput(got, Cold(context, 20));

  // Fork and get on the replica that is now behind (B) also start from the newest record.
  const std::vector<int32_t> latest = WaitRecord(id, 4);
  auto child = b->ForkSession(id, absl::ZeroDuration(), "");
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->history_tokens, static_cast<int32_t>(latest.size()));
  // (Stats are published by the step thread, which the fork woke.)
  for (const absl::Time end = absl::Now() + absl::Seconds(20);
       b->Stats().remote.sessions_refreshed_total == 0 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(b->Stats().remote.sessions_refreshed_total, 1);
  auto info = b->GetSession(id, "");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->history_tokens, static_cast<int32_t>(latest.size()));
}

// A turn needs the session's record: while the service is down a turn is UNAVAILABLE
// (retry), never run from a copy that may be stale; a turn whose commit is refused is
// not acknowledged and not in the conversation: the next turn starts from the record.
TEST_F(RemoteTierTest, ATurnIsAcknowledgedOnlyOnceItsRecordIsCommitted) {
  auto a = Replica();
  const auto [id, history] = FirstTurn(*a);
  ASSERT_FALSE(id.empty());
  const std::vector<int32_t> next = Encode(" Then she saw a cat.");
  const auto turn_on_a = [&](const std::vector<int32_t>& prompt) {
    Request r = Greedy(prompt, 10, /*bos=*/true);
    r.session_id = id;
    return testing::RunRequest(*a, r);
  };

  service_.SetDown(true);
  EXPECT_EQ(turn_on_a(next).status.code(), absl::StatusCode::kUnavailable);
  EXPECT_GT(a->Stats().remote.errors_total, 0);
  service_.SetDown(false);

  service_.FailNextPut(absl::AbortedError("changed meanwhile"));
  const Result refused = turn_on_a(next);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kAborted) << refused.status;
  EXPECT_EQ(service_.StoredSession(id)->tokens, history);
  // (Stats are published by the step thread: the snapshot with the conflict may follow
  // the answer.)
  for (const absl::Time end = absl::Now() + absl::Seconds(20);
       a->Stats().remote.session_conflicts_total == 0 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(a->Stats().remote.session_conflicts_total, 1);

  const Result after = turn_on_a(next);
  ASSERT_TRUE(after.status.ok()) << after.status;
  EXPECT_EQ(after.usage.prompt_tokens, static_cast<int32_t>(history.size() + next.size()));
  // Acknowledged: the record holds the turn the moment the call returned.
  const std::optional<cache::RemoteSession> record = service_.StoredSession(id);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->turn_ends.size(), 2u);
  EXPECT_EQ(static_cast<int32_t>(record->tokens.size()),
            after.usage.prompt_tokens + after.usage.completion_tokens);
  EXPECT_EQ(record->version, 3);  // open, turn 1, turn 3
}

// A commit whose answer is lost (the call timed out after the service wrote it) is
// resolved before the answer: the record is read under a fencing lease. Written: the turn
// is acknowledged. Not written: "not recorded", and a late arrival of the write is refused.
TEST_F(RemoteTierTest, ACommitWithAnUnknownOutcomeIsResolvedBeforeTheAnswer) {
  auto a = Replica();
  const auto [id, history] = FirstTurn(*a);
  ASSERT_FALSE(id.empty());
  const auto turn_on_a = [&](const std::vector<int32_t>& prompt) {
    Request r = Greedy(prompt, 10, /*bos=*/false);
    r.session_id = id;
    return testing::RunRequest(*a, r);
  };
  service_.FailNextPut(absl::DeadlineExceededError("answer lost"), /*applied=*/true);
  const Result landed = turn_on_a(Encode(" Then she saw a cat."));
  ASSERT_TRUE(landed.status.ok()) << landed.status;
  std::optional<cache::RemoteSession> record = service_.StoredSession(id);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->turn_ends.size(), 2u);
  EXPECT_EQ(static_cast<int32_t>(record->tokens.size()),
            landed.usage.prompt_tokens + landed.usage.completion_tokens);

  service_.FailNextPut(absl::DeadlineExceededError("no answer"), /*applied=*/false);
  const Result lost = turn_on_a(Encode(" The cat ran."));
  EXPECT_EQ(lost.status.code(), absl::StatusCode::kUnavailable) << lost.status;
  EXPECT_THAT(std::string(lost.status.message()), ::testing::HasSubstr("not recorded"));
  EXPECT_EQ(service_.StoredSession(id)->turn_ends.size(), 2u);

  // The next turn continues the recorded history (the lost turn is not in it).
  const Result next = turn_on_a(Encode(" The end."));
  ASSERT_TRUE(next.status.ok()) << next.status;
  EXPECT_EQ(service_.StoredSession(id)->turn_ends.size(), 3u);
}

// A session whose record cannot be written is not opened: another replica could not find
// it. The caller gets UNAVAILABLE (retry) and nothing is left behind.
TEST_F(RemoteTierTest, NoSessionOpensWithoutItsRecord) {
  auto a = Replica();
  // Open sessions as the engine counts them (a request first, so the snapshot is fresh).
  const auto open_sessions = [&] {
    EXPECT_TRUE(testing::RunRequest(*a, Greedy(Encode("Once"), 1, /*bos=*/true)).status.ok());
    return a->Stats().open_sessions;
  };
  service_.SetDown(true);
  const auto opened = a->OpenSession(absl::ZeroDuration(), "");
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kUnavailable) << opened.status();
  service_.SetDown(false);
  EXPECT_EQ(open_sessions(), 0);
  const auto reopened = a->OpenSession(absl::ZeroDuration(), "");
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_TRUE(service_.StoredSession(reopened->id).has_value());
  EXPECT_EQ(open_sessions(), 1);

  // A fork reads its parent's record first: the service answers that, then fails the
  // child's write.
  service_.FailNextPut(absl::UnavailableError("no answer"));
  const auto forked = a->ForkSession(reopened->id, absl::ZeroDuration(), "");
  EXPECT_EQ(forked.status().code(), absl::StatusCode::kUnavailable) << forked.status();
  EXPECT_EQ(open_sessions(), 1);
}

// Two turns of one session at once on two replicas: while A's turn runs (it holds the
// lease), B's is refused with the busy status; afterwards B continues A's history.
TEST_F(RemoteTierTest, OneTurnAtATimeAcrossReplicas) {
  auto a = Replica();
  auto b = Replica();
  const auto [id, history] = FirstTurn(*a);
  ASSERT_FALSE(id.empty());
  auto gate = std::make_shared<testing::Gate>();
  auto blocker = std::make_shared<testing::CollectingSink>([gate](int n) {
    if (n == 1) gate->BlockHere();
  });
  Request long_turn = Greedy(Encode(" She ran."), 8, /*bos=*/false);
  long_turn.session_id = id;
  ASSERT_TRUE(a->Submit(long_turn, blocker).ok());
  gate->WaitEntered();
  Request other = Greedy(Encode(" He sat."), 8, /*bos=*/false);
  other.session_id = id;
  const Result refused = testing::RunRequest(*b, other);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kAborted) << refused.status;
  EXPECT_EQ(b->Stats().remote.session_conflicts_total, 1);
  gate->Open();
  ASSERT_TRUE(blocker->Wait().status.ok());
  const std::vector<int32_t> after_a = service_.StoredSession(id)->tokens;
  const Result got = testing::RunRequest(*b, other);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.usage.prompt_tokens,
            static_cast<int32_t>(after_a.size() + Encode(" He sat.").size()));
}

// A turn cancelled while it waits for the session cache (its record is being read on
// the session worker, off the RPC thread) ends cancelled when the answer comes, runs
// nothing, and leaves the session free: the next turn starts at once from the record.
TEST_F(RemoteTierTest, ATurnCancelledWhileItsRecordIsReadNeverRuns) {
  auto a = Replica();
  const auto [id, history] = FirstTurn(*a);
  ASSERT_FALSE(id.empty());
  auto gate = std::make_shared<testing::Gate>();
  service_.SetGetSessionHook([gate] { gate->BlockHere(); });
  Request turn = Greedy(Encode(" He sat."), 8, /*bos=*/false);
  turn.session_id = id;
  auto sink = std::make_shared<testing::CollectingSink>();
  absl::StatusOr<RequestId> request = a->Submit(turn, sink);  // returns while the read waits
  ASSERT_TRUE(request.ok()) << request.status();
  gate->WaitEntered();
  a->Cancel(*request);
  service_.SetGetSessionHook(nullptr);
  gate->Open();
  const Result cancelled = sink->Wait();
  EXPECT_EQ(cancelled.reason, FinishReason::kCancelled);
  EXPECT_TRUE(cancelled.tokens.empty());
  EXPECT_EQ(service_.StoredSession(id)->tokens, history);
  const Result next = testing::RunRequest(*a, turn);
  ASSERT_TRUE(next.status.ok()) << next.status;
  EXPECT_EQ(next.usage.prompt_tokens,
            static_cast<int32_t>(history.size() + Encode(" He sat.").size()));
}

// A replica that died mid-turn holds the session only until its lease expires.
TEST_F(RemoteTierTest, ADeadReplicasLeaseExpires) {
  absl::Time now = absl::Now();
  std::mutex now_mu;
  service_.SetNow([&] {
    std::lock_guard<std::mutex> lock(now_mu);
    return now;
  });
  auto a = Replica();
  const auto [id, history] = FirstTurn(*a);
  ASSERT_FALSE(id.empty());
  const cache::LeaseRequest dead{"dead-replica/1/7", absl::Seconds(30)};
  ASSERT_TRUE(service_.GetSession(id, &dead, absl::InfiniteFuture()).ok());
  Request turn = Greedy(Encode(" He sat."), 8, /*bos=*/false);
  turn.session_id = id;
  EXPECT_EQ(testing::RunRequest(*a, turn).status.code(), absl::StatusCode::kAborted);
  {
    std::lock_guard<std::mutex> lock(now_mu);
    now += absl::Seconds(31);
  }
  const Result got = testing::RunRequest(*a, turn);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.usage.prompt_tokens,
            static_cast<int32_t>(history.size() + Encode(" He sat.").size()));
}

// Closed on A: B, which holds a copy from its own turn, refuses the session from then
// on (the tombstone), for turns and for GetSession; so does A.
TEST_F(RemoteTierTest, ClosedOnOneReplicaIsClosedEverywhere) {
  auto a = Replica();
  auto b = Replica();
  const auto [id, history] = FirstTurn(*a);
  ASSERT_FALSE(id.empty());
  Request turn = Greedy(Encode(" He sat."), 8, /*bos=*/false);
  turn.session_id = id;
  ASSERT_TRUE(testing::RunRequest(*b, turn).status.ok());
  ASSERT_TRUE(a->CloseSession(id, "").ok());
  EXPECT_TRUE(service_.StoredSession(id)->closed);
  EXPECT_EQ(testing::RunRequest(*b, turn).status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b->GetSession(id, "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a->GetSession(id, "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b->ForkSession(id, absl::ZeroDuration(), "").status().code(),
            absl::StatusCode::kNotFound);
  // Closing again, anywhere, is NOT_FOUND.
  EXPECT_EQ(b->CloseSession(id, "").code(), absl::StatusCode::kNotFound);
}

// A dead service costs nothing but the reuse: every request succeeds, the incident is
// logged once, and its end once.
TEST_F(RemoteTierTest, ADeadServiceIsOneIncidentNotAnError) {
  auto a = Replica();
  service_.SetDown(true);
  const std::vector<int32_t> prompt = Encode(
      "Once upon a time, there was a little boy named Tim. He had a small boat that he loved "
      "to sail on the lake near his house.");
  for (int i = 0; i < 3; ++i) {
    const Result r = testing::RunRequest(*a, Greedy(prompt, 8, /*bos=*/true));
    ASSERT_TRUE(r.status.ok()) << r.status;
  }
  EXPECT_GT(a->Stats().remote.errors_total, 0);
  // a's write-behind jobs are done (dropped) before the service comes back: b then finds
  // nothing and stores its own blocks.
  WaitStored(*a, 0);
  service_.SetDown(false);
  auto b = Replica();
  ASSERT_TRUE(testing::RunRequest(*b, Greedy(prompt, 8, /*bos=*/true)).status.ok());
  WaitStored(*b, 1);
  // a's own incident ends with its next successful call.
  ASSERT_TRUE(testing::RunRequest(*a, Greedy(prompt, 8, /*bos=*/true)).status.ok());
  WaitStored(*a, 0);
  std::lock_guard<std::mutex> lock(log_mu_);
  ASSERT_GE(log_.size(), 2u);
  EXPECT_THAT(log_[0], ::testing::StartsWith("session cache call"));
  EXPECT_EQ(std::count_if(log_.begin(), log_.end(),
                          [](const std::string& l) { return l.starts_with("session cache call"); }),
            1);
  EXPECT_THAT(log_.back(), ::testing::HasSubstr("reachable again"));
}

// Blocks evicted between the service's Lookup and the Fetch: the replica uses the
// unbroken prefix it got and recomputes the rest, never a partial chain as whole.
TEST_F(RemoteTierTest, AChainCutShortIsUsedAsAPrefix) {
  auto a = Replica();
  const auto [id, history] = FirstTurn(*a);
  service_.SetFetchLimit(2);
  auto b = Replica();
  ExpectNextTurnWithRemoteBlocks(*b, id, history, 2);
  EXPECT_EQ(b->Stats().remote.rejected_blocks_total, 0);
  // The blocks reserved for the rest of the chain, never written, went back: once the
  // turn is written behind, only the session holds blocks.
  WaitStored(*b, 0);
}

TEST_F(RemoteTierTest, FetchesReserveAtMostTheirShareOfThePool) {
  auto a = Replica();
  const auto [id, history] = FirstTurn(*a);
  // A cap of 2.5 blocks: the fetch reserves 2, brings those and computes the rest.
  const int64_t blocks = Replica(/*remote=*/false)->Stats().blocks_total;
  ASSERT_GT(blocks, 10);
  auto b = Replica(/*remote=*/true, [&](Engine::Options& o) {
    o.remote.max_import_fraction = 2.5 / static_cast<double>(blocks);
  });
  ExpectNextTurnWithRemoteBlocks(*b, id, history, 2);

  for (double bad : {0.0, -0.5, 1.5}) {
    Engine::Options o;
    o.remote_cache = &service_;
    o.remote.max_import_fraction = bad;
    const auto e = testing::MakeEngine(*stories_.model, o, "cpu_blas");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(e.status().message(), ::testing::HasSubstr("remote.max_import_fraction")) << bad;
  }
}

}  // namespace
}  // namespace kvserve::engine
