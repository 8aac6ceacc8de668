// What reaches a sink through the engine, on the stories260K tokenizer with a scripted
// backend (engine/testing/scripted_backend.h): end of text, stop token ids, stop strings
// across tokens, UTF-8 hold-back and the final flushes, event by event. (The engine
// tests in engine_test.cc run a random model whose vocabulary has no tokenizer.)
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/testing/engine_testing.h"
#include "engine/testing/scripted_backend.h"
#include "engine/testing/stories_model.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace kvserve::engine {
namespace {

using testing::Result;
using testing::RunRequest;
using testing::ScriptedBackend;

class EngineOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto stories = testing::LoadStories260K();
    ASSERT_TRUE(stories.ok()) << stories.status();
    model_ = std::move(stories->model);
    tok_ = std::move(stories->tokenizer);
    prompt_ = tok_->Encode("Once upon a time", /*add_bos=*/true);
  }

  // Runs a greedy request for prompt_ whose completion is `script` (then EOS forever).
  Result Run(const std::vector<int32_t>& script, SamplingParams sampling = SamplingParams()) {
    const int32_t prompt_len = static_cast<int32_t>(prompt_.size());
    const int32_t eos = model_->vocab().eos_id;
    Engine::Options options;
    auto backend = std::make_unique<ScriptedBackend>(
        options.KvLayoutFor(model_->config()), model_->config().vocab_size,
        [script, prompt_len, eos](int32_t context) {
          const size_t i = static_cast<size_t>(context - prompt_len);
          return i < script.size() ? script[i] : eos;
        });
    auto engine = CreateEngine(options, *model_, std::move(backend));
    EXPECT_TRUE(engine.ok()) << engine.status();
    Request r;
    r.prompt_tokens = prompt_;
    sampling.temperature = 0.0f;
    r.sampling = sampling;
    return RunRequest(**engine, r);
  }
  std::vector<int32_t> Encode(const std::string& text) const {
    return tok_->Encode(text, /*add_bos=*/false);
  }
  static std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  std::unique_ptr<model::Model> model_;
  std::unique_ptr<model::Tokenizer> tok_;
  std::vector<int32_t> prompt_;
};

TEST_F(EngineOutputTest, EosEndsTheStreamWithoutBeingSent) {
  const std::vector<int32_t> words = Encode("Lily was happy.");
  const Result r = Run(words);  // the script continues with EOS
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.reason, FinishReason::kStop);
  EXPECT_EQ(r.tokens, words);
  EXPECT_EQ(r.text, " Lily was happy.");
  EXPECT_EQ(r.usage.completion_tokens, static_cast<int32_t>(words.size()) + 1);  // EOS counts
}

TEST_F(EngineOutputTest, IgnoreEosRunsToMaxTokens) {
  SamplingParams sampling;
  sampling.ignore_eos = true;
  sampling.max_tokens = 5;
  const Result r = Run({}, sampling);  // EOS at every step
  EXPECT_EQ(r.reason, FinishReason::kLength);
  EXPECT_EQ(r.tokens.size(), 5u);
}

TEST_F(EngineOutputTest, StopTokenIdEndsBeforeIt) {
  const std::vector<int32_t> words = Encode("one two three");
  SamplingParams sampling;
  sampling.stop_token_ids = {words[1]};
  const Result r = Run(words, sampling);
  EXPECT_EQ(r.reason, FinishReason::kStop);
  EXPECT_EQ(r.tokens, std::vector<int32_t>{words[0]});
}

TEST_F(EngineOutputTest, StopStringAcrossTokensIsCutAndNeverSent) {
  SamplingParams sampling;
  sampling.stop_strings = {"red ball"};
  const Result r = Run(Encode("a big, red ball. Then"), sampling);
  EXPECT_EQ(r.reason, FinishReason::kStopString);
  EXPECT_EQ(r.text, " a big, ");
  for (const std::string& t : r.event_texts) EXPECT_EQ(t.find("red"), std::string::npos) << t;
}

TEST_F(EngineOutputTest, SplitCharacterIsHeldBackUntilComplete) {
  // " 中": byte-fallback tokens; the events of the first bytes carry no text.
  const std::vector<int32_t> script = Encode("a 中");
  const Result r = Run(script);
  EXPECT_EQ(r.reason, FinishReason::kStop);
  EXPECT_EQ(r.text, " a 中");
  ASSERT_EQ(r.event_texts.size(), script.size());
  EXPECT_EQ(r.event_texts[script.size() - 3], "");
  EXPECT_EQ(r.event_texts[script.size() - 2], "");
  EXPECT_EQ(r.event_texts.back(), "中");
}

TEST_F(EngineOutputTest, HeldBackTextIsFlushedByEosAsATextOnlyEvent) {
  SamplingParams sampling;
  sampling.stop_strings = {"balloon"};
  const Result r = Run(Encode("a ball"), sampling);  // then EOS
  EXPECT_EQ(r.reason, FinishReason::kStop);
  EXPECT_EQ(r.text, " a ball");
  ASSERT_FALSE(r.event_tokens.empty());
  EXPECT_EQ(r.event_tokens.back(), kTextOnlyToken);
  EXPECT_EQ(r.event_texts.back(), "ball");
}

TEST_F(EngineOutputTest, HeldBackTextIsFlushedAtTheLengthLimit) {
  SamplingParams sampling;
  sampling.stop_strings = {"balloon"};
  const std::vector<int32_t> words = Encode("a ball");
  sampling.max_tokens = static_cast<int32_t>(words.size());
  const Result r = Run(Concat(words, Encode(" more")), sampling);
  EXPECT_EQ(r.reason, FinishReason::kLength);
  EXPECT_EQ(r.text, " a ball");
  EXPECT_EQ(r.tokens, words);
}

TEST_F(EngineOutputTest, CutCharacterAtTheLimitFlushesAsReplacement) {
  const std::vector<int32_t> script = Encode("a 中");
  SamplingParams sampling;
  sampling.max_tokens = static_cast<int32_t>(script.size()) - 1;  // stop inside the character
  const Result r = Run(script, sampling);
  EXPECT_EQ(r.reason, FinishReason::kLength);
  EXPECT_EQ(r.text, " a \xEF\xBF\xBD");
}

}  // namespace
}  // namespace kvserve::engine
