#include "bench/stats.h"

#include <vector>

#include "gtest/gtest.h"

namespace kvserve::bench {
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

}  // namespace
}  // namespace kvserve::bench
