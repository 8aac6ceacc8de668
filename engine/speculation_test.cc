// The n-gram draft source, the draft-length rule and the options' validation.
#include "engine/speculation.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/lead_calibration.h"
#include "engine/ngram_draft.h"
#include "engine/speculation_governor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<int32_t> Propose(NgramDraftSource& source, const std::vector<int32_t>& context,
                             int32_t k) {
  std::vector<int32_t> out;
  source.Propose(1, context, k, &out);
  return out;
}

TEST(NgramDraftTest, ProposesWhatFollowedTheLatestEarlierOccurrence) {
  NgramDraftSource source(NgramDraftOptions{});
  // Suffix "1 2 3" occurred at 0 (followed by 4 5) and at 6 (followed by 9 8): the latest.
  const std::vector<int32_t> context = {1, 2, 3, 4, 5, 0, 1, 2, 3, 9, 8, 7, 1, 2, 3};
  EXPECT_THAT(Propose(source, context, 2), ElementsAre(9, 8));
  EXPECT_THAT(Propose(source, context, 5), ElementsAre(9, 8, 7, 1, 2));
  // A shorter suffix when the longer ones never occurred before: "7".
  EXPECT_THAT(Propose(source, {5, 7, 6, 4, 7}, 3), ElementsAre(6, 4, 7));
}

TEST(NgramDraftTest, NothingToCopyProposesNothing) {
  NgramDraftSource source(NgramDraftOptions{});
  EXPECT_THAT(Propose(source, {1, 2, 3, 4, 5}, 4), IsEmpty());
  EXPECT_THAT(Propose(source, {7}, 4), IsEmpty());
  EXPECT_THAT(Propose(source, {}, 4), IsEmpty());
}

TEST(NgramDraftTest, MinNgramAndLookbackBoundTheSearch) {
  NgramDraftOptions two;
  two.min_ngram = 2;
  NgramDraftSource strict(two);
  EXPECT_THAT(Propose(strict, {5, 7, 6, 4, 7}, 3), IsEmpty());  // only "7" matches
  NgramDraftOptions near;
  near.max_lookback = 4;  // only the last 4 positions are searched
  NgramDraftSource short_memory(near), long_memory(NgramDraftOptions{});
  const std::vector<int32_t> context = {1, 2, 8, 5, 6, 7, 3, 1, 2};
  EXPECT_THAT(Propose(long_memory, context, 2), ElementsAre(8, 5));
  EXPECT_THAT(Propose(short_memory, context, 2), IsEmpty());
}

TEST(DraftLengthTest, GrowsWhenAllAcceptedElseFollowsTheAcceptance) {
  EXPECT_EQ(NextDraftLength(0, 5, 5, 5), 5);  // unset: max, capped
  EXPECT_EQ(NextDraftLength(3, 3, 3, 5), 4);
  EXPECT_EQ(NextDraftLength(5, 5, 2, 5), 3);
  EXPECT_EQ(NextDraftLength(5, 5, 0, 5), 1);
  EXPECT_EQ(NextDraftLength(1, 0, 0, 5), 1);  // nothing verified (the budget cut them):
  EXPECT_EQ(NextDraftLength(4, 0, 0, 5), 4);  // unchanged
}

TEST(LeadCalibrationTest, BinsDoubleFromTwoToTheMinusTen) {
  EXPECT_EQ(LeadCalibration::BinOf(0.0f), 0);
  EXPECT_EQ(LeadCalibration::BinOf(-1.0f), 0);
  EXPECT_EQ(LeadCalibration::BinOf(std::nanf("")), 0);
  EXPECT_EQ(LeadCalibration::BinOf(0x1p-11f), 0);
  EXPECT_EQ(LeadCalibration::BinOf(0x1p-10f), 1);
  EXPECT_EQ(LeadCalibration::BinOf(0x1.fp-10f), 1);
  EXPECT_EQ(LeadCalibration::BinOf(0x1p-9f), 2);
  EXPECT_EQ(LeadCalibration::BinOf(0.05f), 6);  // [2^-5, 2^-4)
  EXPECT_EQ(LeadCalibration::BinOf(40.0f), LeadCalibration::kBins - 2);
  EXPECT_EQ(LeadCalibration::BinOf(64.0f), LeadCalibration::kBins - 1);
  EXPECT_EQ(LeadCalibration::BinOf(1e30f), LeadCalibration::kBins - 1);
}

TEST(LeadCalibrationTest, LearnsTheAcceptancePerLeadAndForgetsSlowly) {
  LeadCalibration c;
  EXPECT_EQ(c.Estimate(0.01f), 1.0);  // nothing seen: drafts are trusted
  for (int i = 0; i < 10; ++i) c.Record(0.01f, false);
  for (int i = 0; i < 30; ++i) c.Record(1.0f, true);
  const double overall = (30.0 + 1) / (40.0 + 1);
  EXPECT_DOUBLE_EQ(c.Estimate(0.01f), (0 + 2 * overall) / (10 + 2));
  EXPECT_DOUBLE_EQ(c.Estimate(0.011f), c.Estimate(0.01f));  // the same bin
  EXPECT_DOUBLE_EQ(c.Estimate(1.0f), (30 + 2 * overall) / (30 + 2));
  EXPECT_DOUBLE_EQ(c.Estimate(8.0f), overall);  // unseen bin: the overall figure
  EXPECT_EQ(c.seen(0.01f), 10);
  // A bin that keeps seeing outcomes halves its counts at kMaxSeen: a change shows.
  for (int i = 0; i < 1000; ++i) c.Record(0.01f, true);
  EXPECT_LE(c.seen(0.01f), LeadCalibration::kMaxSeen);
  EXPECT_GT(c.Estimate(0.01f), 0.95);
}

// A source that stops where it is unsure: back to the longest after a fully accepted
// draft (however short it chose to make it), one shorter per rejection.
TEST(DraftLengthTest, APacedSourceGetsTheLongestUnlessRejectionsRepeat) {
  EXPECT_EQ(NextDraftLength(0, 2, 2, 8, /*paced=*/true), 8);
  EXPECT_EQ(NextDraftLength(5, 1, 1, 8, true), 8);
  EXPECT_EQ(NextDraftLength(8, 3, 2, 8, true), 7);
  EXPECT_EQ(NextDraftLength(7, 1, 0, 8, true), 6);
  EXPECT_EQ(NextDraftLength(1, 1, 0, 8, true), 1);
  EXPECT_EQ(NextDraftLength(6, 0, 0, 8, true), 6);  // nothing verified: unchanged
}

// Synthetic timings: drafts twice as fast at batch 1, half as fast at batch 16. The
// governor measures both, keeps the faster per batch size, and re-measures the other
// every explore_every-th step, so it follows when the timings change sides.
TEST(SpeculationGovernorTest, KeepsTheFasterChoicePerBatchSizeAndNoticesChanges) {
  SpeculationGovernor g(8);
  auto run = [&g](int32_t decoding, double with_rate, double without_rate, int steps) {
    int speculated = 0;
    for (int i = 0; i < steps; ++i) {
      const bool with = g.ShouldSpeculate(decoding);
      speculated += with ? 1 : 0;
      g.Record(decoding, with, 100, 100.0 / (with ? with_rate : without_rate));
    }
    return speculated;
  };
  // The first steps of a class measure both choices.
  EXPECT_EQ(run(1, 2000, 1000, 2 * SpeculationGovernor::kMinSamples),
            SpeculationGovernor::kMinSamples);
  EXPECT_EQ(run(1, 2000, 1000, 80), 80 - 10);  // all but every 8th (exploration)
  EXPECT_NEAR(g.rate(1, true), 2000, 1);
  EXPECT_NEAR(g.rate(1, false), 1000, 1);
  run(16, 500, 1000, 2 * SpeculationGovernor::kMinSamples);
  EXPECT_EQ(run(16, 500, 1000, 80), 10);  // only the exploring steps
  EXPECT_EQ(g.rate(12, true), 0.0);       // 8-15 is a class of its own, not measured yet
  // Batch 1 turns slower with drafts (the drafts stopped matching): the exploring steps
  // teach it, and drafts stop.
  run(1, 400, 1000, 200);
  EXPECT_LE(run(1, 400, 1000, 80), 10);
  // Non-positive measurements are ignored.
  g.Record(2, true, 0, 1.0);
  g.Record(2, true, 10, 0.0);
  EXPECT_EQ(g.rate(2, true), 0.0);
}

TEST(SpeculativeOptionsTest, EachBadFieldIsNamed) {
  EXPECT_TRUE(ValidateSpeculativeOptions({}).ok());
  SpeculativeOptions o;
  o.source = "eagle";
  EXPECT_THAT(ValidateSpeculativeOptions(o).message(), HasSubstr("speculative.source"));
  o = {};
  o.draft_max = 0;
  EXPECT_THAT(ValidateSpeculativeOptions(o).message(), HasSubstr("speculative.draft_max"));
  o = {};
  o.ngram.min_ngram = 3;
  o.ngram.max_ngram = 2;
  EXPECT_THAT(ValidateSpeculativeOptions(o).message(), HasSubstr("speculative.ngram"));
  o = {};
  o.explore_every = 1;
  EXPECT_THAT(ValidateSpeculativeOptions(o).message(), HasSubstr("speculative.explore_every"));
  o = {};
  o.max_batch = -1;
  EXPECT_THAT(ValidateSpeculativeOptions(o).message(), HasSubstr("speculative.max_batch"));
  o = {};
  o.source = "ngram";
  EXPECT_NE(CreateDraftSource(o), nullptr);
  EXPECT_EQ(CreateDraftSource(SpeculativeOptions{}), nullptr);
}

}  // namespace
}  // namespace kvserve::engine
