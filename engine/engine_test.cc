#include "engine/engine.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "backends/testing/random_model.h"
#include "common/testing/fake_clock.h"
#include "engine/engine_options.h"
#include "engine/field_error.h"
#include "engine/testing/engine_testing.h"
#include "engine/testing/small_model.h"
#include "engine/testing/stories_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace kvserve::engine {
namespace {

using ::kvserve::engine::testing::CollectingSink;
using ::kvserve::engine::testing::Gate;
using ::kvserve::engine::testing::MakeEngine;
using ::kvserve::engine::testing::Result;
using ::kvserve::engine::testing::RunRequest;
using ::testing::HasSubstr;

std::unique_ptr<model::Model> RandomModel() { return testing::SmallRandomModel(); }

Engine::Options SmallOptions() {
  Engine::Options o;
  o.kv_budget_bytes = size_t{8} << 20;
  o.max_step_tokens = 64;
  return o;
}

using testing::CyclicPrompt;
using testing::GreedyRequest;

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void ExpectSameOutput(const Result& got, const Result& want) {
  ASSERT_TRUE(got.status.ok()) << got.status;
  ASSERT_TRUE(want.status.ok()) << want.status;
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size());
  for (size_t i = 0; i < got.top_logprobs.size(); ++i) {
    ASSERT_EQ(got.top_logprobs[i].size(), want.top_logprobs[i].size());
    for (size_t k = 0; k < got.top_logprobs[i].size(); ++k) {
      EXPECT_EQ(got.top_logprobs[i][k].token, want.top_logprobs[i][k].token);
      EXPECT_NEAR(got.top_logprobs[i][k].logprob, want.top_logprobs[i][k].logprob, 1e-4);
    }
  }
}

// Every engine test runs on both backends: reuse, preemption and batching must give the
// same results on each.
class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = RandomModel(); }
  std::unique_ptr<Engine> NewEngine(const Engine::Options& o = SmallOptions()) {
    auto e = MakeEngine(*model_, o, GetParam());
    EXPECT_TRUE(e.ok()) << e.status();
    return *std::move(e);
  }
  std::unique_ptr<model::Model> model_;
};

TEST_P(EngineTest, CachedPrefixGivesTheColdResult) {
  auto warm = NewEngine();
  const std::vector<int32_t> shared = CyclicPrompt(70);
  const Result first = RunRequest(*warm, GreedyRequest(Concat(shared, CyclicPrompt(5, 1)), 6, 5));
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.usage.cached_tokens, 0);
  EXPECT_EQ(first.usage.computed_tokens, 75);

  const Request second = GreedyRequest(Concat(shared, CyclicPrompt(9, 2)), 12, 5);
  const Result reused = RunRequest(*warm, second);
  EXPECT_EQ(reused.usage.prompt_tokens, 79);
  EXPECT_EQ(reused.usage.cached_tokens, 64);  // the 4 full blocks of the shared prefix
  EXPECT_EQ(reused.usage.computed_tokens, 15);

  auto cold = NewEngine();
  const Result fresh = RunRequest(*cold, second);
  EXPECT_EQ(fresh.usage.cached_tokens, 0);
  ExpectSameOutput(reused, fresh);
  EXPECT_EQ(reused.tokens.size(), 12u);
  EXPECT_EQ(reused.reason, FinishReason::kLength);
}

// f16 K/V is the default (every other case here); f32 stays an option and reuses as exactly.
TEST_P(EngineTest, F32KvReuseIsExact) {
  Engine::Options o = SmallOptions();
  o.kv_dtype = model::DType::kF32;
  auto warm = NewEngine(o);
  const std::vector<int32_t> shared = CyclicPrompt(48, 9);
  ASSERT_TRUE(RunRequest(*warm, GreedyRequest(Concat(shared, CyclicPrompt(3, 1)), 2)).status.ok());
  const Request second = GreedyRequest(Concat(shared, CyclicPrompt(6, 2)), 10, 4);
  const Result reused = RunRequest(*warm, second);
  EXPECT_EQ(reused.usage.cached_tokens, 48);
  auto cold = NewEngine(o);
  ExpectSameOutput(reused, RunRequest(*cold, second));
}

TEST_P(EngineTest, SessionTurnReusesHistoryAndMatchesColdRequest) {
  auto engine = NewEngine();
  auto session = engine->OpenSession(absl::ZeroDuration(), "");
  ASSERT_TRUE(session.ok()) << session.status();

  const std::vector<int32_t> turn1 = CyclicPrompt(40, 3);
  Request r1 = GreedyRequest(turn1, 10, 3);
  r1.session_id = session->id;
  const Result out1 = RunRequest(*engine, r1);
  ASSERT_TRUE(out1.status.ok()) << out1.status;
  ASSERT_EQ(out1.tokens.size(), 10u);
  auto info = engine->GetSession(session->id, "");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->history_tokens, 50);
  EXPECT_FALSE(info->busy);

  const std::vector<int32_t> turn2 = CyclicPrompt(7, 4);
  Request r2 = GreedyRequest(turn2, 8, 3);
  r2.session_id = session->id;
  const Result out2 = RunRequest(*engine, r2);
  // History 50 tokens = 3 full blocks (48) + 2; every full block is reused and only
  // the partial block's 2 tokens and the 7 new tokens are computed.
  EXPECT_EQ(out2.usage.prompt_tokens, 57);
  EXPECT_EQ(out2.usage.cached_tokens, 48);
  EXPECT_EQ(out2.usage.computed_tokens, 9);

  auto cold = NewEngine();
  const Result want =
      RunRequest(*cold, GreedyRequest(Concat(Concat(turn1, out1.tokens), turn2), 8, 3));
  ExpectSameOutput(out2, want);
  EXPECT_TRUE(engine->CloseSession(session->id, "").ok());
  EXPECT_EQ(engine->GetSession(session->id, "").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(EngineTest, EmptyTurnContinuesASessionWithHistoryOnly) {
  auto engine = NewEngine();
  // Stateless, and a session without history: nothing to continue.
  EXPECT_EQ(
      engine->Submit(GreedyRequest({}, 4), std::make_shared<CollectingSink>()).status().code(),
      absl::StatusCode::kInvalidArgument);
  auto session = engine->OpenSession(absl::ZeroDuration(), "");
  ASSERT_TRUE(session.ok()) << session.status();
  Request empty = GreedyRequest({}, 6, 2);
  empty.session_id = session->id;
  EXPECT_EQ(engine->Submit(empty, std::make_shared<CollectingSink>()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The refused turn left the session usable (not busy).
  EXPECT_FALSE(engine->GetSession(session->id, "")->busy);

  const std::vector<int32_t> turn1 = CyclicPrompt(20, 5);
  Request r1 = GreedyRequest(turn1, 5, 2);
  r1.session_id = session->id;
  const Result out1 = RunRequest(*engine, r1);
  ASSERT_TRUE(out1.status.ok()) << out1.status;
  const Result out2 = RunRequest(*engine, empty);
  ASSERT_TRUE(out2.status.ok()) << out2.status;
  EXPECT_EQ(out2.usage.prompt_tokens, 25);
  ASSERT_EQ(out2.tokens.size(), 6u);
  auto cold = NewEngine();
  ExpectSameOutput(out2, RunRequest(*cold, GreedyRequest(Concat(turn1, out1.tokens), 6, 2)));
}

TEST_P(EngineTest, InvalidFieldsAreNamedByTheirRequestPath) {
  auto engine = NewEngine();
  auto field_of = [&engine](Request r) {
    auto submitted = engine->Submit(std::move(r), std::make_shared<CollectingSink>());
    EXPECT_EQ(submitted.status().code(), absl::StatusCode::kInvalidArgument);
    return ErrorField(submitted.status()).value_or("(none)");
  };
  Request bad_token = GreedyRequest({1, 2, 100000}, 2);
  EXPECT_EQ(field_of(bad_token), "prompt_tokens[2]");
  Request bad_top_p = GreedyRequest(CyclicPrompt(4), 2);
  bad_top_p.sampling.top_p = 2.0f;
  EXPECT_EQ(field_of(bad_top_p), "sampling.top_p");
  Request bad_stop = GreedyRequest(CyclicPrompt(4), 2);
  bad_stop.sampling.stop_token_ids = {-1};
  EXPECT_EQ(field_of(bad_stop), "sampling.stop_token_ids[0]");
  Request long_salt = GreedyRequest(CyclicPrompt(4), 2);
  long_salt.cache_salt = std::string(10000, 's');
  EXPECT_EQ(field_of(long_salt), "cache_salt");
  Request too_long = GreedyRequest(CyclicPrompt(model_->config().context_length), 2);
  EXPECT_EQ(field_of(too_long), "prompt_tokens");
  EXPECT_EQ(field_of(GreedyRequest({}, 2)), "prompt_tokens");
}

TEST_P(EngineTest, StopListsBeyondTheConfiguredLimitsAreNamed) {
  Engine::Options o = SmallOptions();
  o.stop_limits = StopLimits{/*max_stop_strings=*/2, /*max_stop_string_bytes=*/4,
                             /*max_stop_token_ids=*/1};
  auto engine = NewEngine(o);
  EXPECT_EQ(engine->submit_limits().stop_limits.max_stop_strings, 2);
  auto status_of = [&engine](std::vector<std::string> strings, std::vector<int32_t> ids) {
    Request r = GreedyRequest(CyclicPrompt(4), 2);
    r.sampling.stop_strings = std::move(strings);
    r.sampling.stop_token_ids = std::move(ids);
    return engine->Submit(std::move(r), std::make_shared<CollectingSink>()).status();
  };
  EXPECT_TRUE(status_of({}, {3}).ok());  // (this model has no tokenizer for stop strings)
  const absl::Status too_many = status_of({"a", "b", "c"}, {});
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorField(too_many), "sampling.stop_strings");
  EXPECT_THAT(std::string(too_many.message()), HasSubstr("max_stop_strings"));
  const absl::Status too_long = status_of({"abcde"}, {});
  EXPECT_EQ(ErrorField(too_long), "sampling.stop_strings[0]");
  EXPECT_THAT(std::string(too_long.message()), HasSubstr("max_stop_string_bytes"));
  const absl::Status too_many_ids = status_of({}, {3, 4});
  EXPECT_EQ(ErrorField(too_many_ids), "sampling.stop_token_ids");
  EXPECT_THAT(std::string(too_many_ids.message()), HasSubstr("max_stop_token_ids"));
}

TEST_P(EngineTest, AddBosOnlyWhereTheContextStarts) {
  auto engine = NewEngine();
  const int32_t bos = model_->vocab().bos_id;
  Request stateless = GreedyRequest(CyclicPrompt(6), 3);
  stateless.add_bos = true;
  const Result with_bos = RunRequest(*engine, stateless);
  ASSERT_TRUE(with_bos.status.ok()) << with_bos.status;
  EXPECT_EQ(with_bos.usage.prompt_tokens, 7);
  std::vector<int32_t> explicit_bos = {bos};
  const std::vector<int32_t> p = CyclicPrompt(6);
  explicit_bos.insert(explicit_bos.end(), p.begin(), p.end());
  ExpectSameOutput(with_bos, RunRequest(*engine, GreedyRequest(explicit_bos, 3)));

  auto session = engine->OpenSession(absl::ZeroDuration(), "");
  ASSERT_TRUE(session.ok());
  Request turn = GreedyRequest(CyclicPrompt(6), 3);
  turn.add_bos = true;
  turn.session_id = session->id;
  ASSERT_TRUE(RunRequest(*engine, turn).status.ok());
  EXPECT_EQ(engine->GetSession(session->id, "")->history_tokens, 1 + 6 + 3);
  // The second turn continues the history: no second BOS.
  const Result second = RunRequest(*engine, turn);
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(second.usage.prompt_tokens, 10 + 6);
}

TEST_P(EngineTest, ForkSharesTheParentsBlocksAndDiverges) {
  auto engine = NewEngine();
  auto parent = engine->OpenSession(absl::Minutes(1), "");
  ASSERT_TRUE(parent.ok());
  const std::vector<int32_t> turn1 = CyclicPrompt(35, 5);
  Request r1 = GreedyRequest(turn1, 6);
  r1.session_id = parent->id;
  const Result out1 = RunRequest(*engine, r1);
  ASSERT_TRUE(out1.status.ok()) << out1.status;

  auto child = engine->ForkSession(parent->id, absl::Minutes(1), "");
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->history_tokens, 41);
  // The parent closes: the child's pins keep the shared blocks.
  ASSERT_TRUE(engine->CloseSession(parent->id, "").ok());

  const std::vector<int32_t> turn2 = CyclicPrompt(4, 6);
  Request r2 = GreedyRequest(turn2, 5, 3);
  r2.session_id = child->id;
  const Result out2 = RunRequest(*engine, r2);
  EXPECT_EQ(out2.usage.cached_tokens, 32);
  auto cold = NewEngine();
  ExpectSameOutput(
      out2, RunRequest(*cold, GreedyRequest(Concat(Concat(turn1, out1.tokens), turn2), 5, 3)));
}

TEST_P(EngineTest, DifferentSaltsNeverShareBlocks) {
  auto engine = NewEngine();
  const std::vector<int32_t> p = CyclicPrompt(50, 7);
  Request a = GreedyRequest(p, 2);
  a.cache_salt = "tenant-a";
  Request b = a;
  b.cache_salt = "tenant-b";
  Request none = a;
  none.cache_salt = "";
  EXPECT_EQ(RunRequest(*engine, a).usage.cached_tokens, 0);
  EXPECT_EQ(RunRequest(*engine, b).usage.cached_tokens, 0);
  EXPECT_EQ(RunRequest(*engine, none).usage.cached_tokens, 0);
  EXPECT_EQ(RunRequest(*engine, a).usage.cached_tokens, 48);
  EXPECT_EQ(RunRequest(*engine, b).usage.cached_tokens, 48);
}

TEST_P(EngineTest, TinyBudgetEvictsAndPreemptsButKeepsResults) {
  // Reference outputs, one request at a time on a roomy engine.
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(
        GreedyRequest(Concat(CyclicPrompt(20), CyclicPrompt(10 + 3 * i, 20 + i)), 30, 2));
  }
  std::vector<Result> want;
  {
    auto roomy = NewEngine();
    for (const Request& r : requests) want.push_back(RunRequest(*roomy, r));
  }
  // 12 blocks of 16 tokens for six sequences of up to ~75 positions each.
  Engine::Options o = SmallOptions();
  o.kv_budget_bytes = 12 * o.KvLayoutFor(model_->config()).block_bytes();
  o.max_step_tokens = 32;
  auto tight = NewEngine(o);
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (const Request& r : requests) {
    sinks.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE(tight->Submit(r, sinks.back()).ok());
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectSameOutput(sinks[i]->Wait(), want[i]);
  }
  const EngineStats stats = tight->Stats();
  EXPECT_GT(stats.preemptions_total, 0);
  EXPECT_EQ(stats.blocks_total, 12);
  EXPECT_EQ(stats.blocks_used, 0);
}

TEST_P(EngineTest, SequenceLongerThanThePoolStopsWithLength) {
  Engine::Options o = SmallOptions();
  o.kv_budget_bytes = 2 * o.KvLayoutFor(model_->config()).block_bytes();
  auto engine = NewEngine(o);
  const Result r = RunRequest(*engine, GreedyRequest(CyclicPrompt(20), 100));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.reason, FinishReason::kLength);
  EXPECT_EQ(r.tokens.size(), 12u);  // 32 positions in the pool
  EXPECT_EQ(RunRequest(*engine, GreedyRequest(CyclicPrompt(40), 1)).status.code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(EngineTest, CancelReturnsEveryBlock) {
  auto engine = NewEngine();
  std::atomic<RequestId> victim{0};
  Engine* e = engine.get();
  auto cancelled = std::make_shared<CollectingSink>([&](int n) {
    if (n != 3) return;
    // The engine may reach the third token before Submit has returned the id to this
    // thread (ids start at 1): wait for it, so the cancel is never a no-op.
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (victim.load() == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    e->Cancel(victim.load());
  });
  auto other = std::make_shared<CollectingSink>();
  auto id = engine->Submit(GreedyRequest(CyclicPrompt(40), 200), cancelled);
  ASSERT_TRUE(id.ok());
  victim = *id;
  ASSERT_TRUE(engine->Submit(GreedyRequest(CyclicPrompt(33, 2), 20), other).ok());
  const Result c = cancelled->Wait();
  EXPECT_EQ(c.reason, FinishReason::kCancelled);
  EXPECT_EQ(c.status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(c.tokens.size(), 10u);
  EXPECT_TRUE(other->Wait().status.ok());
  engine->Cancel(*id);  // late and unknown cancels are ignored
  engine->Cancel(12345);
  EXPECT_EQ(engine->Stats().blocks_used, 0);
  EXPECT_FALSE(cancelled->bad_order());
}

TEST_P(EngineTest, DeadlineExpiryReturnsEveryBlock) {
  common::testing::FakeClock clock(absl::UnixEpoch());
  Engine::Options o = SmallOptions();
  o.clock = &clock;
  auto engine = NewEngine(o);
  auto sink = std::make_shared<CollectingSink>([&](int n) {
    if (n == 4) clock.Advance(absl::Seconds(10));
  });
  Request r = GreedyRequest(CyclicPrompt(30), 200);
  r.deadline = absl::UnixEpoch() + absl::Seconds(5);
  ASSERT_TRUE(engine->Submit(r, sink).ok());
  const Result got = sink->Wait();
  EXPECT_EQ(got.reason, FinishReason::kDeadline);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(got.tokens.size(), 4u);
  EXPECT_EQ(engine->Stats().blocks_used, 0);
  // A request whose deadline has already passed never runs.
  Request late = GreedyRequest(CyclicPrompt(10), 5);
  late.deadline = absl::UnixEpoch();
  const Result l = RunRequest(*engine, late);
  EXPECT_EQ(l.reason, FinishReason::kDeadline);
  EXPECT_TRUE(l.tokens.empty());
}

TEST_P(EngineTest, FullQueueIsOverloaded) {
  Engine::Options o = SmallOptions();
  o.max_waiting_requests = 2;
  o.max_waiting_prompt_tokens = 100;
  auto engine = NewEngine(o);
  Gate gate;
  auto blocker = std::make_shared<CollectingSink>([&](int n) {
    if (n == 1) gate.BlockHere();
  });
  ASSERT_TRUE(engine->Submit(GreedyRequest(CyclicPrompt(5), 3), blocker).ok());
  gate.WaitEntered();  // the step thread is parked: nothing gets admitted now
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 2; ++i) {
    sinks.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE(engine->Submit(GreedyRequest(CyclicPrompt(10, i), 3), sinks.back()).ok());
  }
  auto rejected =
      engine->Submit(GreedyRequest(CyclicPrompt(10, 9), 3), std::make_shared<CollectingSink>());
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kResourceExhausted);
  gate.Open();
  for (auto& s : sinks) EXPECT_TRUE(s->Wait().status.ok());
  EXPECT_TRUE(blocker->Wait().status.ok());
  // Token bound: one prompt of 90 fits, a second does not while the first waits.
  Gate gate2;
  auto blocker2 = std::make_shared<CollectingSink>([&](int n) {
    if (n == 1) gate2.BlockHere();
  });
  ASSERT_TRUE(engine->Submit(GreedyRequest(CyclicPrompt(5), 3), blocker2).ok());
  gate2.WaitEntered();
  auto big = std::make_shared<CollectingSink>();
  ASSERT_TRUE(engine->Submit(GreedyRequest(CyclicPrompt(90), 1), big).ok());
  EXPECT_EQ(engine->Submit(GreedyRequest(CyclicPrompt(20), 1), std::make_shared<CollectingSink>())
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  gate2.Open();
  EXPECT_TRUE(big->Wait().status.ok());
}

TEST_P(EngineTest, SessionRulesAndExpiry) {
  common::testing::FakeClock clock(absl::UnixEpoch());
  Engine::Options o = SmallOptions();
  o.max_sessions = 2;
  o.clock = &clock;
  auto engine = NewEngine(o);
  EXPECT_EQ(engine->GetSession("nope", "").status().code(), absl::StatusCode::kNotFound);
  Request orphan = GreedyRequest(CyclicPrompt(4), 2);
  orphan.session_id = "nope";
  EXPECT_EQ(RunRequest(*engine, orphan).status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->OpenSession(absl::Hours(1000), "").status().code(),
            absl::StatusCode::kInvalidArgument);

  auto s = engine->OpenSession(absl::Seconds(30), "");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(engine->OpenSession(absl::Seconds(30), "").ok());
  EXPECT_EQ(engine->OpenSession(absl::Seconds(30), "").status().code(),
            absl::StatusCode::kResourceExhausted);

  // One turn at a time.
  Gate gate;
  auto blocker = std::make_shared<CollectingSink>([&](int n) {
    if (n == 1) gate.BlockHere();
  });
  Request t1 = GreedyRequest(CyclicPrompt(40), 3);
  t1.session_id = s->id;
  ASSERT_TRUE(engine->Submit(t1, blocker).ok());
  gate.WaitEntered();
  EXPECT_TRUE(engine->GetSession(s->id, "")->busy);
  Request t2 = GreedyRequest(CyclicPrompt(3), 3);
  t2.session_id = s->id;
  EXPECT_EQ(engine->Submit(t2, std::make_shared<CollectingSink>()).status().code(),
            absl::StatusCode::kAborted);
  gate.Open();
  ASSERT_TRUE(blocker->Wait().status.ok());
  EXPECT_EQ(engine->GetSession(s->id, "")->history_tokens, 43);

  // The session pins its 2 full blocks while open...
  EXPECT_EQ(engine->Stats().blocks_used, 2);
  EXPECT_EQ(engine->Stats().open_sessions, 2);
  // ...and expires 30 s after its last turn; its blocks become evictable cache.
  clock.Advance(absl::Seconds(31));
  EXPECT_EQ(engine->GetSession(s->id, "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RunRequest(*engine, t2).status.code(), absl::StatusCode::kNotFound);
  const Result after =
      RunRequest(*engine, GreedyRequest(CyclicPrompt(2), 1));  // a step runs after the expiry
  ASSERT_TRUE(after.status.ok());
  EXPECT_EQ(engine->Stats().blocks_used, 0);
  EXPECT_EQ(engine->Stats().open_sessions, 0);
}

TEST_P(EngineTest, IdleSessionPinsAreReclaimedUnderPressure) {
  Engine::Options o = SmallOptions();
  o.kv_budget_bytes = 8 * o.KvLayoutFor(model_->config()).block_bytes();
  auto engine = NewEngine(o);
  auto s = engine->OpenSession(absl::ZeroDuration(), "");
  ASSERT_TRUE(s.ok());
  Request t1 = GreedyRequest(CyclicPrompt(70), 2);
  t1.session_id = s->id;
  ASSERT_TRUE(RunRequest(*engine, t1).status.ok());
  EXPECT_EQ(engine->Stats().blocks_used, 4);
  EXPECT_EQ(engine->Stats().session_blocks, 4);
  EXPECT_EQ(engine->Stats().session_reclaims_total, 0);
  // A stateless request needing 6 blocks: the idle session's pins are released.
  const Result big = RunRequest(*engine, GreedyRequest(CyclicPrompt(90, 3), 2));
  ASSERT_TRUE(big.status.ok()) << big.status;
  EXPECT_EQ(big.reason, FinishReason::kLength);
  // Both tokens generated: a request that ran out of blocks would also end kLength, but
  // with fewer tokens.
  EXPECT_EQ(big.tokens.size(), 2u);
  EXPECT_EQ(big.usage.completion_tokens, 2);
  EXPECT_EQ(engine->Stats().session_reclaims_total, 1);
  EXPECT_EQ(engine->Stats().session_blocks, 0);
  EXPECT_GT(engine->Stats().evictions_total, 0);
  // The session still works (recomputing what was evicted).
  Request t2 = GreedyRequest(CyclicPrompt(5, 1), 2);
  t2.session_id = s->id;
  const Result r2 = RunRequest(*engine, t2);
  ASSERT_TRUE(r2.status.ok()) << r2.status;
  EXPECT_EQ(r2.usage.prompt_tokens, 77);
}

TEST_P(EngineTest, SeededSamplingDoesNotDependOnOtherRequests) {
  Request r;
  r.prompt_tokens = CyclicPrompt(25, 8);
  r.sampling.temperature = 0.9f;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = 1234;
  r.sampling.max_tokens = 20;
  r.sampling.ignore_eos = true;
  Result alone;
  {
    auto engine = NewEngine();
    alone = RunRequest(*engine, r);
  }
  auto engine = NewEngine();
  std::vector<std::shared_ptr<CollectingSink>> noise;
  for (int i = 0; i < 6; ++i) {
    noise.push_back(std::make_shared<CollectingSink>());
    Request n = GreedyRequest(CyclicPrompt(10 + i, 30 + i), 15);
    n.sampling.temperature = 1.0f;
    ASSERT_TRUE(engine->Submit(n, noise.back()).ok());
  }
  auto sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE(engine->Submit(r, sink).ok());
  const Result busy = sink->Wait();
  EXPECT_EQ(busy.tokens, alone.tokens);
  for (auto& n : noise) n->Wait();
}

TEST_P(EngineTest, UsageTimesFollowTheRequest) {
  // A clock that moves 1 ms every time it is read.
  common::testing::FakeClock clock(absl::UnixEpoch(), /*tick=*/absl::Milliseconds(1));
  Engine::Options o = SmallOptions();
  o.clock = &clock;
  auto engine = NewEngine(o);
  const Result r = RunRequest(*engine, GreedyRequest(CyclicPrompt(20), 3));
  ASSERT_TRUE(r.status.ok());
  EXPECT_GT(r.usage.queue_time, absl::ZeroDuration());
  EXPECT_GT(r.usage.time_to_first_token, r.usage.queue_time);  // sampled after the forward pass
  EXPECT_GT(r.usage.total_time, r.usage.time_to_first_token);
  EXPECT_EQ(r.usage.completion_tokens, 3);
}

TEST_P(EngineTest, RejectsBadRequests) {
  auto engine = NewEngine();
  auto code = [&](Request r) {
    return engine->Submit(std::move(r), std::make_shared<CollectingSink>()).status().code();
  };
  EXPECT_EQ(code(GreedyRequest({}, 3)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(GreedyRequest({1, 96}, 3)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(GreedyRequest({1, -1}, 3)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(GreedyRequest(CyclicPrompt(512), 3)), absl::StatusCode::kInvalidArgument);
  Request neg = GreedyRequest(CyclicPrompt(3), 3);
  neg.sampling.temperature = -1;
  EXPECT_EQ(code(neg), absl::StatusCode::kInvalidArgument);
  Request salty = GreedyRequest(CyclicPrompt(3), 3);
  salty.cache_salt = std::string(1000, 'x');
  EXPECT_EQ(code(salty), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Submit(GreedyRequest(CyclicPrompt(3), 3), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  engine->Shutdown(absl::InfiniteFuture());
  EXPECT_EQ(code(GreedyRequest(CyclicPrompt(3), 3)), absl::StatusCode::kUnavailable);
  engine->Shutdown(absl::InfiniteFuture());  // idempotent
}

TEST_P(EngineTest, ShutdownLetsRunningRequestsFinish) {
  auto engine = NewEngine();
  auto sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE(engine->Submit(GreedyRequest(CyclicPrompt(10), 20), sink).ok());
  engine->Shutdown(absl::InfiniteFuture());
  const Result r = sink->Wait();
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(r.tokens.size(), 20u);
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineTest, ::testing::Values("reference", "cpu_blas"));

TEST_P(EngineTest, ShutdownFromASinkCallback) {
  auto engine = NewEngine();
  Engine* e = engine.get();
  auto sink = std::make_shared<CollectingSink>([e](int n) {
    if (n == 2) e->Shutdown(absl::InfinitePast());
  });
  ASSERT_TRUE(engine->Submit(GreedyRequest(CyclicPrompt(10), 50), sink).ok());
  const Result r = sink->Wait();
  EXPECT_EQ(r.reason, FinishReason::kCancelled);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.tokens.size(), 2u);
  engine.reset();  // joins the step thread
}

TEST(EngineCreateTest, RejectsMismatchedBackendAndBadOptions) {
  auto model = RandomModel();
  Engine::Options o;
  Engine::Options other = o;
  other.block_tokens = 32;
  auto backend =
      backends::CreateBackend("reference", *model, other.KvLayoutFor(model->config()), {});
  ASSERT_TRUE(backend.ok());
  EXPECT_EQ(CreateEngine(o, *model, *std::move(backend)).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.max_step_tokens = 0;
  EXPECT_EQ(testing::MakeEngine(*model, o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Engine::Options();
  o.kv_budget_bytes = 10;
  EXPECT_EQ(testing::MakeEngine(*model, o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Engine::Options();
  o.stop_limits.max_stop_string_bytes = 0;
  EXPECT_EQ(testing::MakeEngine(*model, o).status().code(), absl::StatusCode::kInvalidArgument);
}

// The real model: greedy from "Once upon a time" is llama2.c's text, with and without
// a cached prefix.
TEST(EngineStoriesTest, GreedyStoryMatchesLlama2c) {
  auto stories = testing::LoadStories260K();
  ASSERT_TRUE(stories.ok()) << stories.status();
  auto& model = stories->model;
  auto& tok = stories->tokenizer;
  auto engine = MakeEngine(*model, Engine::Options());
  ASSERT_TRUE(engine.ok()) << engine.status();
  Request r;
  r.prompt_tokens = tok->Encode("Once upon a time", /*add_bos=*/true);
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = 200;
  r.sampling.stop_strings = {"too high."};
  const std::string want =
      ", there was a little girl named Lily. She loved to play outside in the park. One day, "
      "she saw a big, red ball. She wanted to play with it, but it was ";
  // Twice: the second run is served from the same engine after the first one's blocks
  // went back to the pool (nothing to reuse: the 5-token prompt fills no block).
  for (int pass = 0; pass < 2; ++pass) {
    const Result got = RunRequest(**engine, r);
    ASSERT_TRUE(got.status.ok()) << got.status;
    EXPECT_EQ(got.reason, FinishReason::kStopString);
    EXPECT_EQ(got.text, want);
    EXPECT_EQ(got.usage.cached_tokens, 0);
  }
  // The run with a cached prefix is tests/golden_test.cc's
  // Stories260KThroughTheEngineWithAndWithoutCachedPrefix (all 252 tokens).
}

}  // namespace
}  // namespace kvserve::engine
