// Speculative decoding through the engine: whatever the drafts, greedy output is the
// output without them (tokens and logprobs), on both backends, with batching, chunked
// prefill, preemption, prefix caching, sessions, stop strings and max_tokens; sampled
// output keeps the target's distribution; rejected positions never reach the prefix
// cache or a session.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "backends/testing/random_model.h"
#include "engine/draft_source.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/sampling_params.h"  // kMaxDraftTokens
#include "engine/testing/chi_square.h"
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
using ::kvserve::engine::testing::MakeEngine;
using ::kvserve::engine::testing::Result;
using ::kvserve::engine::testing::RunRequest;

std::unique_ptr<model::Model> RandomModel() { return testing::SmallRandomModel(); }

Engine::Options BaseOptions() {
  Engine::Options o;
  o.kv_budget_bytes = size_t{8} << 20;
  o.max_step_tokens = 64;
  o.block_tokens = 4;  // drafts often cross a block boundary
  // Draft whenever allowed: these tests check the mechanism, not when it pays.
  o.speculative.adaptive = false;
  return o;
}

std::vector<int32_t> Prompt(int n, int32_t salt = 0) { return testing::CyclicPrompt(n, salt); }

Request Greedy(std::vector<int32_t> prompt, int max_tokens) {
  return testing::GreedyRequest(std::move(prompt), max_tokens, /*top_logprobs=*/3);
}

void ExpectSameOutput(const Result& got, const Result& want) {
  ASSERT_TRUE(got.status.ok()) << got.status;
  ASSERT_TRUE(want.status.ok()) << want.status;
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.text, want.text);
  EXPECT_EQ(got.reason, want.reason);
  EXPECT_EQ(got.usage.completion_tokens, want.usage.completion_tokens);
  EXPECT_EQ(got.logprobs, want.logprobs);  // the same logits rows, bit for bit
  ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size());
  for (size_t i = 0; i < got.top_logprobs.size(); ++i) {
    ASSERT_EQ(got.top_logprobs[i].size(), want.top_logprobs[i].size());
    for (size_t k = 0; k < got.top_logprobs[i].size(); ++k) {
      EXPECT_EQ(got.top_logprobs[i][k].token, want.top_logprobs[i][k].token);
      EXPECT_EQ(got.top_logprobs[i][k].logprob, want.top_logprobs[i][k].logprob);
    }
  }
}

// Proposes k tokens drawn from a hash of the context: almost always rejected.
class RandomDrafts final : public DraftSource {
 public:
  std::string_view name() const override { return "random"; }
  void Propose(uint64_t, std::span<const int32_t> context, int32_t k,
               std::vector<int32_t>* out) override {
    uint64_t h = context.size() * 0x9e3779b97f4a7c15ULL;
    for (int32_t t : context) h = (h ^ static_cast<uint64_t>(t)) * 0x100000001b3ULL;
    for (int32_t i = 0; i < k; ++i) {
      h = h * 6364136223846793005ULL + 1442695040888963407ULL;
      out->push_back(static_cast<int32_t>((h >> 33) % 96));
    }
  }
};

// Knows the answers: proposes what follows the context in `script` (the output of a run
// without drafts), at most `longest` tokens, corrupting the proposal's last token on
// every `corrupt_every`-th call (0: never). Records the lengths the engine asks for.
class ScriptedDrafts final : public DraftSource {
 public:
  ScriptedDrafts(std::vector<std::vector<int32_t>> scripts, int corrupt_every, bool paced = false,
                 int32_t longest = kMaxDraftTokens)
      : scripts_(std::move(scripts)),
        corrupt_every_(corrupt_every),
        paced_(paced),
        longest_(longest) {}
  std::string_view name() const override { return "scripted"; }
  bool PacesItself() const override { return paced_; }
  void Propose(uint64_t, std::span<const int32_t> context, int32_t k,
               std::vector<int32_t>* out) override {
    ++calls_;
    asked_.push_back(k);
    k = std::min(k, longest_);
    for (const std::vector<int32_t>& s : scripts_) {
      if (s.size() <= context.size() || !std::equal(context.begin(), context.end(), s.begin())) {
        continue;
      }
      const size_t n = std::min(static_cast<size_t>(k), s.size() - context.size());
      out->insert(out->end(), s.begin() + context.size(), s.begin() + context.size() + n);
      if (corrupt_every_ > 0 && calls_ % corrupt_every_ == 0) out->back() = (out->back() + 1) % 96;
      return;
    }
  }

  const std::vector<int32_t>& asked() const { return asked_; }

 private:
  std::vector<std::vector<int32_t>> scripts_;
  int corrupt_every_;
  bool paced_;
  int32_t longest_;
  int calls_ = 0;
  std::vector<int32_t> asked_;
};

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class SpeculativeEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = RandomModel(); }
  std::unique_ptr<Engine> NewEngine(const Engine::Options& o) {
    auto e = MakeEngine(*model_, o, GetParam());
    EXPECT_TRUE(e.ok()) << e.status();
    return *std::move(e);
  }
  std::unique_ptr<Engine> WithSource(DraftSource* source, Engine::Options o = BaseOptions()) {
    o.speculative.custom_source = source;
    return NewEngine(o);
  }
  std::unique_ptr<model::Model> model_;
};

TEST_P(SpeculativeEngineTest, AnyDraftGivesTheOutputWithoutDrafts) {
  const std::vector<Request> requests = {Greedy(Prompt(9, 1), 40), Greedy(Prompt(23, 2), 33),
                                         Greedy(Concat(Prompt(12, 3), Prompt(12, 3)), 25)};
  std::vector<Result> want;
  {
    auto plain = NewEngine(BaseOptions());
    for (const Request& r : requests) want.push_back(RunRequest(*plain, r));
  }
  std::vector<std::vector<int32_t>> scripts;
  for (size_t i = 0; i < requests.size(); ++i) {
    std::vector<int32_t> s = requests[i].prompt_tokens;
    s.insert(s.end(), want[i].tokens.begin(), want[i].tokens.end());
    scripts.push_back(s);
  }
  RandomDrafts random;
  ScriptedDrafts oracle(scripts, 0), half(scripts, 2);
  Engine::Options ngram = BaseOptions();
  ngram.speculative.source = "ngram";
  struct Case {
    const char* name;
    std::unique_ptr<Engine> engine;
  };
  std::vector<Case> cases;
  cases.push_back({"ngram", NewEngine(ngram)});
  cases.push_back({"random", WithSource(&random)});
  cases.push_back({"oracle", WithSource(&oracle)});
  cases.push_back({"half right", WithSource(&half)});
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    int64_t proposed = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      const Result got = RunRequest(*c.engine, requests[i]);
      ExpectSameOutput(got, want[i]);
      EXPECT_LE(got.usage.draft_tokens_accepted, got.usage.draft_tokens);
      proposed += got.usage.draft_tokens;
    }
    const SpeculativeStats s = c.engine->Stats().speculative;
    EXPECT_EQ(s.draft_tokens_total, proposed);
    int64_t verifications = 0, accepted = 0;
    for (size_t a = 0; a < s.accepted_length_counts.size(); ++a) {
      verifications += s.accepted_length_counts[a];
      accepted += static_cast<int64_t>(a) * s.accepted_length_counts[a];
    }
    EXPECT_EQ(verifications, s.verifications_total);
    EXPECT_EQ(accepted, s.accepted_tokens_total);
    if (std::string(c.name) != "ngram") {
      EXPECT_GT(proposed, 0);
    }
  }
  // The oracle's drafts are all accepted: far fewer steps than tokens.
  const EngineStats oracle_stats = cases[2].engine->Stats();
  EXPECT_EQ(oracle_stats.speculative.accepted_tokens_total,
            oracle_stats.speculative.draft_tokens_total);
  EXPECT_LT(oracle_stats.steps_total, 98 / 3);
  EXPECT_EQ(oracle_stats.speculative.source, "scripted");
}

TEST_P(SpeculativeEngineTest, RejectedPositionsNeverReachThePrefixCache) {
  // Random drafts write K/V of wrong tokens beyond each sequence's length, into blocks
  // that later fill up with the right ones. A request that reuses the whole history must
  // then equal a cold run without drafts.
  RandomDrafts random;
  auto engine = WithSource(&random);
  const Request first = Greedy(Prompt(10, 5), 30);
  const Result a = RunRequest(*engine, first);
  ASSERT_TRUE(a.status.ok());
  ASSERT_GT(a.usage.draft_tokens, 0);
  const Request second = Greedy(Concat(Concat(first.prompt_tokens, a.tokens), Prompt(3, 6)), 12);
  const Result reused = RunRequest(*engine, second);
  EXPECT_GE(reused.usage.cached_tokens, 36);  // 9 full blocks of 4
  auto cold = NewEngine(BaseOptions());
  ExpectSameOutput(reused, RunRequest(*cold, second));
}

TEST_P(SpeculativeEngineTest, SessionsKeepTheSameHistory) {
  RandomDrafts random;
  Engine::Options ngram = BaseOptions();
  ngram.speculative.source = "ngram";
  std::vector<std::unique_ptr<Engine>> engines;
  engines.push_back(NewEngine(BaseOptions()));
  engines.push_back(WithSource(&random));
  engines.push_back(NewEngine(ngram));
  std::vector<std::vector<Result>> turns(engines.size());
  std::vector<int32_t> history(engines.size());
  for (size_t e = 0; e < engines.size(); ++e) {
    auto session = engines[e]->OpenSession(absl::ZeroDuration(), "");
    ASSERT_TRUE(session.ok()) << session.status();
    for (int t = 0; t < 3; ++t) {
      Request r = Greedy(Concat(Prompt(6, t), Prompt(6, t)), 15 + t);
      r.session_id = session->id;
      turns[e].push_back(RunRequest(*engines[e], r));
    }
    auto info = engines[e]->GetSession(session->id, "");
    ASSERT_TRUE(info.ok());
    history[e] = info->history_tokens;
  }
  for (size_t e = 1; e < engines.size(); ++e) {
    SCOPED_TRACE(e);
    for (size_t t = 0; t < turns[0].size(); ++t) ExpectSameOutput(turns[e][t], turns[0][t]);
    EXPECT_EQ(history[e], history[0]);
    EXPECT_EQ(turns[e][2].usage.cached_tokens, turns[0][2].usage.cached_tokens);
  }
}

TEST_P(SpeculativeEngineTest, BatchingAndPreemptionKeepResults) {
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(Greedy(Concat(Prompt(20), Prompt(10 + 3 * i, 20 + i)), 30));
  }
  std::vector<Result> want;
  {
    auto roomy = NewEngine(BaseOptions());
    for (const Request& r : requests) want.push_back(RunRequest(*roomy, r));
  }
  RandomDrafts random;
  Engine::Options o = BaseOptions();
  o.kv_budget_bytes = 48 * o.KvLayoutFor(model_->config()).block_bytes();
  o.max_step_tokens = 32;
  o.speculative.max_batch = 8;  // speculate with all six running
  auto tight = WithSource(&random, o);
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
  EXPECT_GT(stats.speculative.draft_tokens_total, 0);
  EXPECT_EQ(stats.blocks_used, 0);
}

TEST_P(SpeculativeEngineTest, RequestAndBatchLimitsBoundTheDrafts) {
  RandomDrafts random;
  auto engine = WithSource(&random);
  Request off = Greedy(Prompt(9, 1), 20);
  off.sampling.max_draft_tokens = 0;
  EXPECT_EQ(RunRequest(*engine, off).usage.draft_tokens, 0);
  Request two = off;
  two.sampling.max_draft_tokens = 2;
  const Result r = RunRequest(*engine, two);
  EXPECT_GT(r.usage.draft_tokens, 0);
  // Every verification had at most 2 drafts: 19 decode steps after the first token.
  EXPECT_LE(r.usage.draft_tokens, 2 * 19);
  Request over = off;
  over.sampling.max_draft_tokens = 65;
  EXPECT_EQ(RunRequest(*engine, over).status.code(), absl::StatusCode::kInvalidArgument);

  Engine::Options never = BaseOptions();
  never.speculative.max_batch = 0;
  auto gated = WithSource(&random, never);
  EXPECT_EQ(RunRequest(*gated, Greedy(Prompt(9, 1), 20)).usage.draft_tokens, 0);
}

// Sampled output with drafts is the output without them for the same seed (the RNG
// advances once per emitted token either way), so it keeps the target's distribution;
// and across seeds the outputs follow it: a two-sample chi-square of the 3-token outputs
// of 600 seeds with drafts against 600 other seeds without, at the 0.001 level
// (deterministic: fixed seeds).
TEST_P(SpeculativeEngineTest, SampledOutputKeepsTheDistribution) {
  Request r = Greedy(Prompt(8, 4), 3);
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 3;
  r.sampling.top_logprobs = 0;
  auto plain = NewEngine(BaseOptions());
  std::vector<int32_t> script = r.prompt_tokens;
  const Result greedy = RunRequest(*plain, Greedy(r.prompt_tokens, 3));
  script.insert(script.end(), greedy.tokens.begin(), greedy.tokens.end());
  ScriptedDrafts drafts({script}, 0);
  auto drafted = WithSource(&drafts);
  std::map<std::vector<int32_t>, int> with, without;
  const int n = 600;
  for (int i = 0; i < n; ++i) {
    r.sampling.seed = 1000 + i;
    const Result same_seed_plain = RunRequest(*plain, r);
    const Result same_seed_drafted = RunRequest(*drafted, r);
    ASSERT_EQ(same_seed_drafted.tokens, same_seed_plain.tokens) << "seed " << 1000 + i;
    ++with[same_seed_drafted.tokens];
    r.sampling.seed = 900000 + i;
    ++without[RunRequest(*plain, r).tokens];
  }
  int dof = 0;
  const double chi2 = testing::TwoSampleChiSquare(with, without, &dof);
  EXPECT_LT(chi2, testing::ChiSquareBound(dof)) << dof + 1 << " outcomes";
  EXPECT_GT(drafted->Stats().speculative.accepted_tokens_total, 0);
}

// The draft length the engine asks for, from a source that proposes at most 2 tokens,
// the second one wrong on every 3rd call (one accepted, one rejected): after a
// rejection a source that paces itself is asked for one less than before, and for the
// longest again after a full acceptance; any other source for one more than was
// accepted, growing back by one per full acceptance.
TEST_P(SpeculativeEngineTest, DraftLengthFollowsTheSourcesPacing) {
  const Request r = Greedy(Prompt(9, 1), 40);
  std::vector<int32_t> script = r.prompt_tokens;
  {
    auto plain = NewEngine(BaseOptions());
    const Result greedy = RunRequest(*plain, r);
    script.insert(script.end(), greedy.tokens.begin(), greedy.tokens.end());
  }
  Engine::Options o = BaseOptions();
  o.speculative.draft_max = 5;
  for (bool paced : {true, false}) {
    SCOPED_TRACE(paced ? "paced" : "not paced");
    ScriptedDrafts drafts({script}, 3, paced, /*longest=*/2);
    auto engine = WithSource(&drafts, o);
    ASSERT_TRUE(RunRequest(*engine, r).status.ok());
    const std::vector<int32_t>& asked = drafts.asked();
    ASSERT_GE(asked.size(), 7u);
    // Calls 1 and 2: 2 drafts accepted; call 3: 1 accepted, 1 rejected; 4, 5 accepted.
    if (paced) {
      EXPECT_THAT(std::vector<int32_t>(asked.begin(), asked.begin() + 7),
                  ::testing::ElementsAre(5, 5, 5, 4, 5, 5, 4));
    } else {
      // 5, 5 (capped), 5; then 1 + 1 accepted = 2, all accepted: 3, 4, and 2 again.
      EXPECT_THAT(std::vector<int32_t>(asked.begin(), asked.begin() + 7),
                  ::testing::ElementsAre(5, 5, 5, 2, 3, 4, 2));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SpeculativeEngineTest,
                         ::testing::Values("reference", "cpu_blas"));

// On stories260K with its tokenizer: text that repeats itself, a stop string inside what
// the n-gram drafts propose, streamed text events: the same as without drafts.
TEST(SpeculativeStoriesTest, NgramDraftsOnRepeatedTextKeepTextAndStops) {
  auto stories = testing::LoadStories260K();
  ASSERT_TRUE(stories.ok()) << stories.status();
  const std::string text =
      "Once upon a time, there was a little girl named Lily. She loved to play outside. "
      "Once upon a time, there was a little girl named Lily. She loved to";
  auto ids = stories->tokenizer->Encode(text, /*add_bos=*/false);
  Engine::Options o = BaseOptions();
  o.block_tokens = 16;
  auto plain = MakeEngine(*stories->model, o, "cpu_blas");
  o.speculative.source = "ngram";
  auto ngram = MakeEngine(*stories->model, o, "cpu_blas");
  ASSERT_TRUE(plain.ok() && ngram.ok());
  for (const std::vector<std::string>& stops :
       {std::vector<std::string>{}, std::vector<std::string>{"Lily"}}) {
    Request r;
    r.prompt_tokens = ids;
    r.add_bos = true;
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = 60;
    r.sampling.stop_strings = stops;
    const Result want = RunRequest(**plain, r);
    const Result got = RunRequest(**ngram, r);
    ExpectSameOutput(got, want);
    EXPECT_EQ(got.event_texts.size() > 0, true);
    std::string streamed;
    for (const std::string& t : got.event_texts) streamed += t;
    EXPECT_EQ(streamed, want.text);
  }
  const SpeculativeStats s = (*ngram)->Stats().speculative;
  std::printf("ngram drafts on stories260K: %lld of %lld accepted\n",
              static_cast<long long>(s.accepted_tokens_total),
              static_cast<long long>(s.draft_tokens_total));
  EXPECT_GT(s.accepted_tokens_total, 0);
}

}  // namespace
}  // namespace kvserve::engine
