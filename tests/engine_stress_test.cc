// Many threads submit, cancel and run session turns against one engine at once while
// memory is tight (eviction, session reclaim and preemption all happen). Run under
// ThreadSanitizer (label tsan). Checks: every accepted request finishes exactly once,
// greedy outputs equal the solo outputs whatever ran beside them, and every block is
// back in the pool at the end.
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "backends/testing/random_model.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

using testing::CollectingSink;
using testing::Result;

constexpr int kPrompts = 6;
constexpr int kThreads = 6;
constexpr int kOpsPerThread = 25;
constexpr int kMaxTokens = 12;

std::vector<int32_t> PromptFor(int i) {
  std::vector<int32_t> p(static_cast<size_t>(18 + 9 * i));
  for (size_t k = 0; k < p.size(); ++k) p[k] = 3 + static_cast<int32_t>((k * 5 + i * 11) % 60);
  return p;
}

Request Greedy(std::vector<int32_t> prompt) {
  Request r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = kMaxTokens;
  r.sampling.ignore_eos = true;
  return r;
}

TEST(EngineStressTest, ConcurrentSubmittersCancelsAndSessions) {
  backends::testing::RandomModelOptions mo;
  mo.config.context_length = 1024;
  auto model = backends::testing::MakeRandomModel(mo);
  ASSERT_TRUE(model.ok()) << model.status();

  // Solo outputs first.
  std::vector<std::vector<int32_t>> want(kPrompts);
  {
    auto solo = testing::MakeEngine(**model, Engine::Options());
    ASSERT_TRUE(solo.ok()) << solo.status();
    for (int i = 0; i < kPrompts; ++i) {
      const Result r = testing::RunRequest(**solo, Greedy(PromptFor(i)));
      ASSERT_TRUE(r.status.ok()) << r.status;
      want[static_cast<size_t>(i)] = r.tokens;
    }
  }

  Engine::Options o;
  o.kv_budget_bytes = 24 * o.KvLayoutFor((*model)->config()).block_bytes();  // 384 positions
  o.max_step_tokens = 48;
  o.max_running_sequences = 8;
  o.max_waiting_requests = 32;
  o.max_sessions = 8;
  auto created = testing::MakeEngine(**model, o);
  ASSERT_TRUE(created.ok()) << created.status();
  Engine& engine = **created;

  std::atomic<int> accepted{0};
  std::atomic<int> overloaded{0};
  std::atomic<int> checked{0};
  std::atomic<bool> stop_stats{false};
  std::mutex failures_mu;
  std::vector<std::string> failures;
  auto fail = [&](std::string what) {
    std::lock_guard<std::mutex> lock(failures_mu);
    failures.push_back(std::move(what));
  };

  std::thread stats_reader([&] {
    while (!stop_stats.load()) {
      const EngineStats s = engine.Stats();
      if (s.blocks_used + s.blocks_cached + s.blocks_free != s.blocks_total) fail("block counts");
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(1000 + t));
      std::vector<std::string> my_sessions;
      std::vector<std::pair<int, std::shared_ptr<CollectingSink>>> pending;
      for (int op = 0; op < kOpsPerThread; ++op) {
        const int kind = static_cast<int>(rng() % 10);
        if (kind < 5) {  // stateless, maybe cancelled right away
          const int p = static_cast<int>(rng() % kPrompts);
          auto sink = std::make_shared<CollectingSink>();
          auto id = engine.Submit(Greedy(PromptFor(p)), sink);
          if (!id.ok()) {
            if (id.status().code() != absl::StatusCode::kResourceExhausted) {
              fail(id.status().ToString());
            }
            ++overloaded;
            continue;
          }
          ++accepted;
          if (kind == 0) engine.Cancel(*id);
          pending.emplace_back(p, sink);
        } else if (kind < 7) {  // a session turn (waits for it)
          if (my_sessions.empty() || rng() % 3 == 0) {
            auto s = engine.OpenSession(absl::Minutes(5), "");
            if (!s.ok()) continue;  // session limit reached by others
            my_sessions.push_back(s->id);
          }
          Request r = Greedy(PromptFor(static_cast<int>(rng() % kPrompts)));
          r.sampling.max_tokens = 4;
          r.session_id = my_sessions[rng() % my_sessions.size()];
          auto sink = std::make_shared<CollectingSink>();
          auto id = engine.Submit(r, sink);
          if (!id.ok()) {
            const auto code = id.status().code();
            if (code != absl::StatusCode::kResourceExhausted &&
                code != absl::StatusCode::kNotFound) {
              fail(id.status().ToString());
            }
            continue;
          }
          ++accepted;
          const Result res = sink->Wait();
          if (!res.status.ok() || sink->bad_order()) fail("turn: " + res.status.ToString());
        } else if (kind < 8) {  // fork
          if (my_sessions.empty()) continue;
          auto f = engine.ForkSession(my_sessions.back(), absl::Minutes(5), "");
          if (f.ok()) my_sessions.push_back(f->id);
        } else if (kind < 9) {  // close
          if (my_sessions.empty()) continue;
          const absl::Status s = engine.CloseSession(my_sessions.back(), "");
          if (!s.ok()) fail("close: " + s.ToString());
          my_sessions.pop_back();
        } else {
          for (const std::string& id : my_sessions) (void)engine.GetSession(id, "");
        }
      }
      for (auto& [p, sink] : pending) {
        const Result r = sink->Wait();
        if (sink->bad_order()) fail("event order");
        if (r.reason == FinishReason::kLength) {
          if (r.tokens != want[static_cast<size_t>(p)]) fail("tokens differ from the solo run");
          ++checked;
        } else if (r.reason != FinishReason::kCancelled) {
          fail("unexpected finish: " + r.status.ToString());
        }
      }
      for (const std::string& id : my_sessions) {
        const absl::Status s = engine.CloseSession(id, "");
        if (!s.ok()) fail("final close: " + s.ToString());
      }
    });
  }
  for (auto& th : threads) th.join();
  stop_stats = true;
  stats_reader.join();

  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_GT(accepted.load(), kThreads * kOpsPerThread / 4);
  EXPECT_GT(checked.load(), 10);
  // One more request after every close makes the step thread release the pins.
  const Result last = testing::RunRequest(engine, Greedy(PromptFor(0)));
  EXPECT_EQ(last.tokens, want[0]);
  const EngineStats s = engine.Stats();
  EXPECT_EQ(s.blocks_used, 0);
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.open_sessions, 0);
  EXPECT_GT(s.prefix_hits_total, 0);
  // What the header promises did happen (memory is tight on purpose).
  EXPECT_GT(s.evictions_total, 0);
  EXPECT_GT(s.preemptions_total, 0);
  EXPECT_GT(s.session_reclaims_total, 0);
  EXPECT_EQ(s.session_blocks, 0);
  std::printf(
      "stress: %lld evictions, %lld preemptions, %lld session reclaims, %lld steps\n",
      static_cast<long long>(s.evictions_total), static_cast<long long>(s.preemptions_total),
      static_cast<long long>(s.session_reclaims_total), static_cast<long long>(s.steps_total));
  engine.Shutdown(absl::InfiniteFuture());
}

}  // namespace
}  // namespace kvserve::engine
