// The output rules on the real stories260K tokenizer (512 SentencePiece tokens with
// byte fallback): end of text, stop ids, stop strings across tokens, UTF-8 hold-back,
// the length limit and the final flush.
#include "engine/output_processor.h"

#include <memory>
#include <string>
#include <vector>

#include "engine/testing/stories_model.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace kvserve::engine {
namespace {

class OutputProcessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto stories = testing::LoadStories260K();
    ASSERT_TRUE(stories.ok()) << stories.status();
    vocab_ = stories->model->vocab();
    tok_ = std::move(stories->tokenizer);
  }

  // Runs `tokens` through a processor until it finishes; returns the concatenated
  // text, the emitted tokens and the finish reason (nullopt if it never finished).
  struct Run {
    std::string text;
    std::vector<int32_t> emitted;
    std::optional<FinishReason> finish;
    int processed = 0;
  };
  Run Process(const SamplingParams& params, const std::vector<int32_t>& tokens,
              int length_limit = 1000) {
    OutputProcessor p(params, vocab_.eos_id, tok_.get(), vocab_.bos_id);
    Run run;
    for (int32_t t : tokens) {
      ++run.processed;
      TokenOutput out = p.Process(t, run.processed >= length_limit);
      run.text += out.text;
      if (out.emit_token) run.emitted.push_back(t);
      if (out.finish.has_value()) {
        run.finish = out.finish;
        break;
      }
    }
    return run;
  }
  std::vector<int32_t> Encode(const std::string& text) const {
    return tok_->Encode(text, /*add_bos=*/false);
  }
  static std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  model::Vocabulary vocab_;
  std::unique_ptr<model::Tokenizer> tok_;
};

TEST_F(OutputProcessorTest, TextIsTheDecodeOfTheEmittedTokens) {
  const std::vector<int32_t> ids = Encode("Lily saw a big, red ball.");
  const Run run = Process(SamplingParams(), ids);
  EXPECT_FALSE(run.finish.has_value());
  EXPECT_EQ(run.emitted, ids);
  EXPECT_EQ(run.text, "Lily saw a big, red ball.");
}

TEST_F(OutputProcessorTest, EosEndsWithoutBeingEmittedUnlessIgnored) {
  const std::vector<int32_t> ids = Concat(Encode("The end."), {vocab_.eos_id, 300});
  const Run stop = Process(SamplingParams(), ids);
  EXPECT_EQ(stop.finish, FinishReason::kStop);
  EXPECT_EQ(stop.emitted, Encode("The end."));
  EXPECT_EQ(stop.text, "The end.");

  SamplingParams ignore;
  ignore.ignore_eos = true;
  const Run on = Process(ignore, ids);
  EXPECT_FALSE(on.finish.has_value());
  EXPECT_EQ(on.processed, static_cast<int>(ids.size()));
  EXPECT_EQ(on.emitted.size(), ids.size());
}

TEST_F(OutputProcessorTest, BosIsAnOrdinaryToken) {
  const Run run = Process(SamplingParams(), Concat(Encode("Hi"), {vocab_.bos_id}));
  EXPECT_FALSE(run.finish.has_value());
  EXPECT_EQ(run.emitted.size(), Encode("Hi").size() + 1);
}

TEST_F(OutputProcessorTest, StopTokenIdEndsBeforeTheToken) {
  const std::vector<int32_t> ids = Encode("one two three");
  SamplingParams params;
  params.stop_token_ids = {ids[1]};
  const Run run = Process(params, ids);
  EXPECT_EQ(run.finish, FinishReason::kStop);
  EXPECT_EQ(run.emitted, std::vector<int32_t>{ids[0]});
  EXPECT_EQ(run.text, tok_->Decode(std::vector<int32_t>{vocab_.bos_id, ids[0]}));
}

TEST_F(OutputProcessorTest, StopStringAcrossTokensCutsTheText) {
  SamplingParams params;
  params.stop_strings = {"red ball"};
  const Run run = Process(params, Encode("Lily saw a big, red ball. Then"));
  EXPECT_EQ(run.finish, FinishReason::kStopString);
  EXPECT_EQ(run.text, "Lily saw a big, ");
}

TEST_F(OutputProcessorTest, HeldBackPrefixIsFlushedAtTheLengthLimit) {
  // "ball" is a proper prefix of the stop string "balloon": held back until the
  // length limit ends the request, then flushed.
  SamplingParams params;
  params.stop_strings = {"balloon"};
  const std::vector<int32_t> ids = Encode("a ball");
  const Run run = Process(params, ids, /*length_limit=*/static_cast<int>(ids.size()));
  EXPECT_EQ(run.finish, FinishReason::kLength);
  EXPECT_EQ(run.text, "a ball");
}

TEST_F(OutputProcessorTest, SplitUtf8IsHeldBackAndFlushed) {
  // "中" has no piece in this 512-token vocabulary: three byte-fallback tokens. Nothing
  // is emitted until the character completes; a cut-off character flushes as U+FFFD.
  const std::vector<int32_t> encoded = Encode("a 中");
  ASSERT_GE(encoded.size(), 3u);
  const std::vector<int32_t> prefix(encoded.begin(), encoded.end() - 3);
  const std::vector<int32_t> ids(encoded.end() - 3, encoded.end());
  for (int32_t id : ids) ASSERT_EQ(vocab_.kinds[id], model::TokenKind::kByte);
  OutputProcessor p(SamplingParams(), vocab_.eos_id, tok_.get(), vocab_.bos_id);
  std::string head;
  for (int32_t id : prefix) head += p.Process(id, false).text;
  EXPECT_EQ(head, "a ");
  EXPECT_EQ(p.Process(ids[0], false).text, "");
  EXPECT_EQ(p.Process(ids[1], false).text, "");
  EXPECT_EQ(p.Process(ids[2], false).text, "中");

  OutputProcessor cut(SamplingParams(), vocab_.eos_id, tok_.get(), vocab_.bos_id);
  for (int32_t id : prefix) cut.Process(id, false);
  EXPECT_EQ(cut.Process(ids[0], false).text, "");
  TokenOutput last = cut.Process(ids[1], /*at_length_limit=*/true);
  EXPECT_EQ(last.finish, FinishReason::kLength);
  EXPECT_EQ(last.text, "\xEF\xBF\xBD");
}

TEST_F(OutputProcessorTest, HeldBackTextIsFlushedOnEos) {
  SamplingParams params;
  params.stop_strings = {"balloon"};
  const Run run = Process(params, Concat(Encode("a ball"), {vocab_.eos_id}));
  EXPECT_EQ(run.finish, FinishReason::kStop);
  EXPECT_EQ(run.text, "a ball");
}

TEST_F(OutputProcessorTest, WithoutTokenizerThereIsNoText) {
  OutputProcessor p(SamplingParams(), vocab_.eos_id, nullptr, -1);
  TokenOutput out = p.Process(300, false);
  EXPECT_TRUE(out.emit_token);
  EXPECT_EQ(out.text, "");
  EXPECT_EQ(p.Process(vocab_.eos_id, false).finish, FinishReason::kStop);
}

}  // namespace
}  // namespace kvserve::engine
