#include "backends/kernels/moe.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::backends::kernels {
namespace {

using ::testing::ElementsAre;

TEST(RouteTopKTest, PicksTheLargestAndNormalizesTheirSoftmax) {
  std::vector<float> logits = {0.0f, 2.0f, -1.0f, 1.0f, 2.0f};
  std::vector<int32_t> ids(3);
  std::vector<float> weights(3);
  RouteTopK(ExpertRouting{}, {}, logits, {}, ids, weights);  // qwen3moe's rule
  // Ties (experts 1 and 4) go to the lower index first.
  EXPECT_THAT(ids, ElementsAre(1, 4, 3));
  const double e2 = std::exp(2.0), e1 = std::exp(1.0), sum = 2 * e2 + e1;
  EXPECT_NEAR(weights[0], e2 / sum, 1e-6);
  EXPECT_NEAR(weights[1], e2 / sum, 1e-6);
  EXPECT_NEAR(weights[2], e1 / sum, 1e-6);
  // `logits` now holds the softmax over all five.
  float total = 0.0f;
  for (float p : logits) total += p;
  EXPECT_NEAR(total, 1.0f, 1e-6);
}

TEST(RouteTopKTest, OneExpertGetsWeightOne) {
  std::vector<float> logits = {-3.0f, 5.0f, 4.0f};
  std::vector<int32_t> ids(1);
  std::vector<float> weights(1);
  RouteTopK(ExpertRouting{}, {}, logits, {}, ids, weights);  // qwen3moe's rule
  EXPECT_THAT(ids, ElementsAre(1));
  EXPECT_FLOAT_EQ(weights[0], 1.0f);
}

// DeepSeek-V3's rule: sigmoid probabilities, a bias that changes the selection but not
// the weights, normalized then scaled weights.
TEST(RouteTopKTest, SigmoidWithSelectionBias) {
  std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.9f};
  std::vector<float> selection(4);
  std::vector<int32_t> ids(2);
  std::vector<float> weights(2);
  ExpertRouting routing;
  routing.gating = model::ExpertGating::kSigmoid;
  routing.scale = 2.5f;
  RouteTopK(routing, bias, logits, selection, ids, weights);
  const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  // s = {0.5, 0.731, 0.881, 0.269 + 0.9 = 1.169}: expert 3 first, then 2.
  EXPECT_THAT(ids, ElementsAre(3, 2));
  const double sum = sigmoid(-1.0) + sigmoid(2.0);
  EXPECT_NEAR(weights[0], sigmoid(-1.0) / sum * 2.5, 1e-6);
  EXPECT_NEAR(weights[1], sigmoid(2.0) / sum * 2.5, 1e-6);
  EXPECT_NEAR(logits[1], sigmoid(1.0), 1e-6);  // the unbiased probabilities
}

// DeepSeek-V2's rule: softmax, weights neither normalized nor scaled.
TEST(RouteTopKTest, UnnormalizedWeightsAreTheProbabilities) {
  std::vector<float> logits = {1.0f, 0.0f, 3.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> weights(2);
  ExpertRouting routing;
  routing.normalize = false;
  RouteTopK(routing, {}, logits, {}, ids, weights);
  EXPECT_THAT(ids, ElementsAre(2, 0));
  const double sum = std::exp(1.0) + 1.0 + std::exp(3.0);
  EXPECT_NEAR(weights[0], std::exp(3.0) / sum, 1e-6);
  EXPECT_NEAR(weights[1], std::exp(1.0) / sum, 1e-6);
}

// Group-limited routing: 3 groups of 2; a group scores the sum of its two best. The
// single best expert (4) is in the worst group, so it is not selected.
TEST(RouteTopKTest, ExpertsOutsideTheBestGroupsAreNotSelected) {
  //                          group 0       group 1      group 2
  std::vector<float> logits = {1.0f, 1.0f, 0.9f, 0.9f, 3.0f, -5.0f};
  std::vector<float> selection(6);
  std::vector<int32_t> ids(3);
  std::vector<float> weights(3);
  ExpertRouting routing;
  routing.gating = model::ExpertGating::kSigmoid;
  routing.n_groups = 3;
  routing.n_groups_used = 2;
  RouteTopK(routing, {}, logits, selection, ids, weights);
  // Scores: group 0 2 * s(1) = 1.462, group 1 2 * s(0.9) = 1.422, group 2
  // s(3) + s(-5) = 0.959: groups 0 and 1 are kept.
  EXPECT_THAT(ids, ElementsAre(0, 1, 2));
}

}  // namespace
}  // namespace kvserve::backends::kernels
