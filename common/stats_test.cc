#include "common/stats.h"

#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::common {
namespace {

TEST(SummarizeTest, OddCountTakesTheMiddleValue) {
  const std::vector<double> v = {5.0, 1.0, 3.0};
  const Summary s = Summarize(v);
  EXPECT_EQ(s.count, 3);
  EXPECT_DOUBLE_EQ(s.median, 3.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 5.0);
  EXPECT_DOUBLE_EQ(s.mean, 3.0);
}

TEST(SummarizeTest, EvenCountAveragesTheTwoMiddleValues) {
  const std::vector<double> v = {4.0, 10.0, 1.0, 2.0};
  const Summary s = Summarize(v);
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.median, 3.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 10.0);
  EXPECT_DOUBLE_EQ(s.mean, 4.25);
}

TEST(SummarizeTest, SingleAndEmpty) {
  const std::vector<double> one = {7.5};
  EXPECT_DOUBLE_EQ(Summarize(one).median, 7.5);
  const Summary empty = Summarize({});
  EXPECT_EQ(empty.count, 0);
  EXPECT_DOUBLE_EQ(empty.median, 0.0);
}

TEST(PercentileTest, RoundsTheRankAndTakesAnyOrder) {
  const std::vector<double> v = {40.0, 10.0, 30.0, 20.0};  // sorted: 10 20 30 40
  EXPECT_DOUBLE_EQ(Percentile(v, 0.0), 10.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 1.0), 40.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.5), 30.0);   // rank round(1.5) = 2: the upper middle
  EXPECT_DOUBLE_EQ(Percentile(v, 0.25), 20.0);  // rank round(0.75) = 1
  EXPECT_DOUBLE_EQ(Percentile(v, 0.16), 10.0);  // rank round(0.48) = 0
  EXPECT_DOUBLE_EQ(Percentile(v, 0.99), 40.0);
  const std::vector<double> odd = {3.0, 1.0, 2.0};
  EXPECT_DOUBLE_EQ(Percentile(odd, 0.5), 2.0);
}

TEST(PercentileTest, ClampsPAndHandlesTinyInputs) {
  const std::vector<double> v = {2.0, 1.0};
  EXPECT_DOUBLE_EQ(Percentile(v, -1.0), 1.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 7.0), 2.0);
  EXPECT_DOUBLE_EQ(Percentile(v, std::numeric_limits<double>::quiet_NaN()), 1.0);
  const std::vector<double> one = {5.0};
  EXPECT_DOUBLE_EQ(Percentile(one, 0.0), 5.0);
  EXPECT_DOUBLE_EQ(Percentile(one, 0.99), 5.0);
  EXPECT_DOUBLE_EQ(Percentile({}, 0.5), 0.0);
}

}  // namespace
}  // namespace kvserve::common
