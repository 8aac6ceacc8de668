#include "backends/kernels/ops.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::backends::kernels {
namespace {

TEST(RmsNormTest, MatchesFormula) {
  const std::vector<float> x = {1.0f, -2.0f, 3.0f, 0.5f};
  const std::vector<float> w = {1.0f, 0.5f, 2.0f, -1.0f};
  const float eps = 1e-5f;
  std::vector<float> out(4);
  RmsNorm(x, w, eps, out);
  double ms = 0;
  for (float v : x) ms += v * v;
  ms /= 4;
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(out[i], w[i] * x[i] / std::sqrt(ms + eps), 1e-6) << i;
  }
}

TEST(RmsNormTest, InPlaceEqualsOutOfPlace) {
  std::vector<float> x = {0.1f, 0.2f, -0.3f};
  const std::vector<float> w = {1.0f, 2.0f, 3.0f};
  std::vector<float> out(3);
  RmsNorm(x, w, 1e-6f, out);
  RmsNorm(x, w, 1e-6f, x);
  EXPECT_EQ(x, out);
}

TEST(RmsNormTest, ZeroInputStaysFinite) {
  std::vector<float> x(8, 0.0f);
  const std::vector<float> w(8, 1.0f);
  RmsNorm(x, w, 1e-5f, x);
  for (float v : x) EXPECT_EQ(v, 0.0f);
}

TEST(SoftmaxTest, KnownValues) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f};
  Softmax(x);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(x[0], std::exp(1.0) / z, 1e-7);
  EXPECT_NEAR(x[1], std::exp(2.0) / z, 1e-7);
  EXPECT_NEAR(x[2], std::exp(3.0) / z, 1e-7);
}

TEST(SoftmaxTest, LargeInputsAreStable) {
  std::vector<float> x = {1000.0f, 1001.0f, -1000.0f};
  Softmax(x);
  EXPECT_NEAR(x[0], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(x[1], std::exp(1.0) / (1.0 + std::exp(1.0)), 1e-6);
  EXPECT_EQ(x[2], 0.0f);
}

TEST(SoftmaxTest, SingleElementIsOne) {
  std::vector<float> x = {-42.0f};
  Softmax(x);
  EXPECT_EQ(x[0], 1.0f);
}

TEST(SiluTest, KnownValues) {
  EXPECT_EQ(Silu(0.0f), 0.0f);
  EXPECT_NEAR(Silu(1.0f), 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
  EXPECT_NEAR(Silu(-2.0f), -2.0 / (1.0 + std::exp(2.0)), 1e-7);
  EXPECT_NEAR(Silu(20.0f), 20.0f, 1e-5);
}

TEST(SwiGluTest, GateTimesUp) {
  std::vector<float> gate = {1.0f, -1.0f, 0.0f};
  const std::vector<float> up = {2.0f, 3.0f, 5.0f};
  SwiGlu(gate, up);
  EXPECT_NEAR(gate[0], 2.0 * 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(gate[1], 3.0 * -1.0 / (1.0 + std::exp(1.0)), 1e-6);
  EXPECT_EQ(gate[2], 0.0f);
}

TEST(DotTest, SumsProducts) {
  const std::vector<float> a = {1.0f, 2.0f, 3.0f};
  const std::vector<float> b = {4.0f, -5.0f, 6.0f};
  EXPECT_EQ(Dot(a, b), 12.0f);
}

TEST(AddInPlaceTest, Adds) {
  std::vector<float> acc = {1.0f, 2.0f};
  AddInPlace(acc, std::vector<float>{0.5f, -2.0f});
  EXPECT_EQ(acc, (std::vector<float>{1.5f, 0.0f}));
}

TEST(ArgMaxTest, FirstMaximumWinsAndNanIsSkipped) {
  EXPECT_EQ(ArgMax(std::vector<float>{}), -1);
  EXPECT_EQ(ArgMax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(ArgMax(std::vector<float>{nan, -5.0f, -1.0f}), 2);
  EXPECT_EQ(ArgMax(std::vector<float>{0.0f, nan, -1.0f}), 0);
}

}  // namespace
}  // namespace kvserve::backends::kernels
