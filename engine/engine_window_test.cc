// Local attention end to end: the engine with a sliding-window model gives back the KV
// blocks before every running sequence's window (its pool holds far fewer positions than
// a sequence 8x the window), and its greedy output, paged and evicting, equals the
// textbook masked forward pass (backends/testing/textbook_forward.h), on both backends,
// also when a later request reuses cached blocks of the first one.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "backends/testing/random_model.h"
#include "backends/testing/textbook_forward.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace kvserve::engine {
namespace {

using testing::GreedyRequest;
using testing::MakeEngine;
using testing::Result;
using testing::RunRequest;

constexpr int kWindow = 16;
constexpr int kBlockTokens = 4;
constexpr int kPoolBlocks = 12;  // 48 positions: a third of one 8x-window sequence

std::unique_ptr<model::Model> WindowModel() {
  backends::testing::RandomModelOptions o;
  o.config.sliding_window = kWindow;
  o.config.context_length = 256;
  o.seed = 5;
  auto m = backends::testing::MakeRandomModel(o);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

// Greedy continuation of `prompt` by the textbook masked forward pass.
std::vector<int32_t> TextbookGreedy(const model::Model& m, const std::vector<int32_t>& prompt,
                                    int max_tokens) {
  absl::StatusOr<std::vector<int32_t>> out =
      backends::testing::TextbookGreedy(m, prompt, max_tokens);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<int32_t>();
}

class EngineWindowTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = WindowModel(); }
  std::unique_ptr<Engine> NewEngine() {
    Engine::Options o;
    o.block_tokens = kBlockTokens;
    o.kv_budget_bytes = kPoolBlocks * o.KvLayoutFor(model_->config()).block_bytes();  // 12 blocks
    o.max_step_tokens = 8;  // prefill in chunks, as a long prompt would be
    auto e = MakeEngine(*model_, o, GetParam());
    EXPECT_TRUE(e.ok()) << e.status();
    return *std::move(e);
  }
  std::unique_ptr<model::Model> model_;
};

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[static_cast<size_t>(i)] = 3 + (i * 7 + salt * 13) % 60;
  return p;
}

TEST_P(EngineWindowTest, ASequenceEightTimesTheWindowRunsInBoundedMemory) {
  auto engine = NewEngine();
  ASSERT_EQ(engine->Stats().blocks_total, kPoolBlocks);
  const std::vector<int32_t> prompt = Prompt(20, 1);
  const int max_tokens = 8 * kWindow - 20;  // 128 positions, 32 blocks' worth
  const Result got = RunRequest(*engine, GreedyRequest(prompt, max_tokens));
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.tokens, TextbookGreedy(*model_, prompt, max_tokens));
  const EngineStats stats = engine->Stats();
  EXPECT_EQ(stats.preemptions_total, 0);
  EXPECT_EQ(stats.blocks_used, 0);
}

TEST_P(EngineWindowTest, ReusedBlocksGiveTheTextbookResult) {
  auto engine = NewEngine();
  const std::vector<int32_t> prompt = Prompt(20, 2);
  const Result first = RunRequest(*engine, GreedyRequest(prompt, 60));
  ASSERT_TRUE(first.status.ok()) << first.status;
  // The second request continues the first's 80 positions: the blocks of its window are
  // still cached (block 0 is long evicted), so only the tail is recomputed.
  std::vector<int32_t> history = prompt;
  history.insert(history.end(), first.tokens.begin(), first.tokens.end());
  std::vector<int32_t> second_prompt = history;
  for (int32_t t : Prompt(6, 3)) second_prompt.push_back(t);
  const Result second = RunRequest(*engine, GreedyRequest(second_prompt, 12));
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_GE(second.usage.cached_tokens, 64);
  EXPECT_EQ(second.tokens, TextbookGreedy(*model_, second_prompt, 12));
}

TEST_P(EngineWindowTest, ALongChatReusesItsWindowEveryTurn) {
  // Six turns make a 144-position history (9x the window) in a 48-position pool: each turn
  // reuses the blocks the session pinned (its window) and equals the textbook pass over
  // the whole history.
  auto engine = NewEngine();
  auto session = engine->OpenSession(absl::ZeroDuration(), "");
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<int32_t> history;
  for (int turn = 0; turn < 6; ++turn) {
    SCOPED_TRACE(turn);
    const std::vector<int32_t> prompt = Prompt(10, 10 + turn);
    Request r = GreedyRequest(prompt, 14);
    r.session_id = session->id;
    const Result out = RunRequest(*engine, r);
    ASSERT_TRUE(out.status.ok()) << out.status;
    std::vector<int32_t> context = history;
    context.insert(context.end(), prompt.begin(), prompt.end());
    if (turn > 0) {
      // Every full block of the computed history (its last token was sampled, not run).
      EXPECT_EQ(out.usage.cached_tokens,
                (static_cast<int>(history.size()) - 1) / kBlockTokens * kBlockTokens);
    }
    EXPECT_EQ(out.tokens, TextbookGreedy(*model_, context, 14));
    history = std::move(context);
    history.insert(history.end(), out.tokens.begin(), out.tokens.end());
  }
  EXPECT_EQ(history.size(), 144u);
  EXPECT_EQ(engine->Stats().preemptions_total, 0);
  EXPECT_LE(engine->Stats().session_blocks, kWindow / kBlockTokens + 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineWindowTest, ::testing::Values("reference", "cpu_blas"));

}  // namespace
}  // namespace kvserve::engine
