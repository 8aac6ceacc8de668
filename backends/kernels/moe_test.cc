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
  RouteTopK(logits, ids, weights);
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
  RouteTopK(logits, ids, weights);
  EXPECT_THAT(ids, ElementsAre(1));
  EXPECT_FLOAT_EQ(weights[0], 1.0f);
}

}  // namespace
}  // namespace kvserve::backends::kernels
