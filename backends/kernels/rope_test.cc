#include "backends/kernels/rope.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::backends::kernels {
namespace {

using model::RopeStyle;

// The textbook formula, written independently of the kernel: pair i of each head
// rotates by pos * base^(-2i / rope_dim).
std::vector<float> DirectRope(std::vector<float> x, int head_dim, int rope_dim, float base,
                              RopeStyle style, int pos) {
  const int half = rope_dim / 2;
  for (size_t h = 0; h < x.size() / head_dim; ++h) {
    float* v = x.data() + h * head_dim;
    for (int i = 0; i < half; ++i) {
      const double theta = pos / std::pow(static_cast<double>(base), 2.0 * i / rope_dim);
      const int a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
      const int b = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half;
      const double va = v[a], vb = v[b];
      v[a] = static_cast<float>(va * std::cos(theta) - vb * std::sin(theta));
      v[b] = static_cast<float>(va * std::sin(theta) + vb * std::cos(theta));
    }
  }
  return x;
}

std::vector<float> Ramp(int n) {
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.25f * static_cast<float>(i % 7) - 0.6f + 0.01f * i;
  return x;
}

struct RopeCase {
  RopeStyle style;
  int head_dim;
  int rope_dim;
};

class RopeFormulaTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeFormulaTest, MatchesDirectFormula) {
  const RopeCase c = GetParam();
  const Rope rope(c.head_dim, c.rope_dim, 10000.0f, c.style);
  for (int pos : {0, 1, 2, 7, 100, 4095}) {
    std::vector<float> x = Ramp(3 * c.head_dim);  // 3 heads
    const std::vector<float> want = DirectRope(x, c.head_dim, c.rope_dim, 10000.0f, c.style, pos);
    rope.Apply(x, pos);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(x[i], want[i], 2e-6) << "pos " << pos << " index " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Styles, RopeFormulaTest,
                         ::testing::Values(RopeCase{RopeStyle::kAdjacentPairs, 8, 8},
                                           RopeCase{RopeStyle::kAdjacentPairs, 8, 4},
                                           RopeCase{RopeStyle::kRotateHalves, 8, 8},
                                           RopeCase{RopeStyle::kRotateHalves, 16, 8}));

TEST_P(RopeFormulaTest, QueriesAndKeysTogetherAsEachAlone) {
  const RopeCase c = GetParam();
  const Rope rope(c.head_dim, c.rope_dim, 10000.0f, c.style);
  for (int pos : {0, 3, 4095}) {
    std::vector<float> q = Ramp(4 * c.head_dim);  // 4 query heads, 2 KV heads
    std::vector<float> k = Ramp(2 * c.head_dim);
    for (float& v : k) v = 0.25f - v;
    std::vector<float> q_alone = q, k_alone = k;
    rope.Apply(q_alone, pos);
    rope.Apply(k_alone, pos);
    rope.Apply(q, k, pos);
    EXPECT_EQ(q, q_alone) << "pos " << pos;
    EXPECT_EQ(k, k_alone) << "pos " << pos;
  }
}

TEST_P(RopeFormulaTest, PrecomputedAnglesRotateAsThePosition) {
  const RopeCase c = GetParam();
  const Rope rope(c.head_dim, c.rope_dim, 10000.0f, c.style);
  for (int pos : {0, 3, 4095}) {
    std::vector<float> q = Ramp(4 * c.head_dim);
    std::vector<float> k = Ramp(2 * c.head_dim);
    for (float& v : k) v = 0.25f - v;
    std::vector<float> q_pos = q, k_pos = k;
    rope.Apply(q_pos, k_pos, pos);
    std::vector<float> cos(c.rope_dim / 2), sin(c.rope_dim / 2);
    rope.Angles(pos, cos, sin);
    rope.Apply(q, k, cos, sin);
    EXPECT_EQ(q, q_pos) << "pos " << pos;
    EXPECT_EQ(k, k_pos) << "pos " << pos;
  }
}

TEST(RopeTest, StylesPairDifferentDimensions) {
  // Position 1, one head of 4: adjacent pairs rotate (0,1) by 1 rad and (2,3) by 0.01 rad;
  // halves rotate (0,2) by 1 rad and (1,3) by 0.01 rad.
  std::vector<float> adjacent = {1.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> halves = adjacent;
  Rope(4, 4, 10000.0f, RopeStyle::kAdjacentPairs).Apply(adjacent, 1);
  Rope(4, 4, 10000.0f, RopeStyle::kRotateHalves).Apply(halves, 1);
  EXPECT_NEAR(adjacent[0], std::cos(1.0), 1e-7);
  EXPECT_NEAR(adjacent[1], std::sin(1.0), 1e-7);
  EXPECT_EQ(adjacent[2], 0.0f);
  EXPECT_NEAR(halves[0], std::cos(1.0), 1e-7);
  EXPECT_EQ(halves[1], 0.0f);
  EXPECT_NEAR(halves[2], std::sin(1.0), 1e-7);
}

TEST(RopeTest, PositionZeroIsIdentityAndDimsBeyondRopeDimUntouched) {
  const Rope rope(8, 4, 10000.0f, RopeStyle::kAdjacentPairs);
  std::vector<float> x = Ramp(8);
  const std::vector<float> original = x;
  rope.Apply(x, 0);
  EXPECT_EQ(x, original);
  rope.Apply(x, 33);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(x[i], original[i]);
}

// YaRN's per-pair frequencies, computed by hand for rope_dim 8, base 10000, original
// context 64, factor 4 (freq_scale 0.25), betas 32 and 1:
//   C(b) = 8 ln(64 / (2 pi b)) / (2 ln 10000):  C(32) = -0.497 -> low = max(0, -1) = 0,
//                                                C(1) = 1.008  -> high = min(7, 2) = 2
//   ramp_i = 1 - clamp(i / 2, 0, 1) = 1, 0.5, 0, 0
//   w_i = 10000^(-i/4) * (0.25 (1 - ramp_i) + ramp_i) = 1, 0.1 * 0.625, 0.01 / 4, 0.001 / 4
// and every cos and sin times the magnitude.
TEST(RopeTest, YarnMixesScaledAndUnscaledAnglesByPair) {
  const RopeYarn yarn{.ext_factor = 1.0f, .orig_context_length = 64, .magnitude = 1.5f};
  const Rope rope(8, 8, 10000.0f, RopeStyle::kAdjacentPairs, 0.25f, {}, yarn);
  const double w[4] = {1.0, 0.0625, 0.0025, 0.00025};
  std::vector<float> cos(4), sin(4);
  rope.Angles(10, cos, sin);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_NEAR(cos[i], 1.5 * std::cos(10 * w[i]), 1e-6);
    EXPECT_NEAR(sin[i], 1.5 * std::sin(10 * w[i]), 1e-6);
  }
  // ext_factor 0: every pair scaled, magnitude still applied.
  const Rope plain(8, 8, 10000.0f, RopeStyle::kAdjacentPairs, 0.25f, {},
                   RopeYarn{.magnitude = 2.0f});
  plain.Angles(10, cos, sin);
  EXPECT_NEAR(cos[0], 2.0 * std::cos(2.5), 1e-6);
  EXPECT_NEAR(sin[1], 2.0 * std::sin(0.25), 1e-6);
  // Apply uses the same angles: (1, 0) at pair 1 becomes magnitude * (cos, sin).
  std::vector<float> x = {0, 0, 1, 0, 0, 0, 0, 0};
  rope.Apply(x, 10);
  EXPECT_NEAR(x[2], 1.5 * std::cos(0.625), 1e-6);
  EXPECT_NEAR(x[3], 1.5 * std::sin(0.625), 1e-6);
}

// ForModel takes YaRN and the magnitude from the config (model::ModelConfig).
TEST(RopeTest, ForModelAppliesTheConfigsYarn) {
  model::ModelConfig c;
  c.head_dim = c.rope_dim = 8;
  c.context_length = 256;
  c.rope_freq_scale = 0.25f;
  c.yarn_ext_factor = 1.0f;
  c.yarn_orig_context_length = 64;
  std::vector<float> cos(4), sin(4);
  Rope::ForModel(c).Angles(10, cos, sin);
  const double magnitude = 1.0 + 0.1 * std::log(4.0);
  EXPECT_NEAR(cos[1], magnitude * std::cos(0.625), 1e-6);
  EXPECT_NEAR(sin[2], magnitude * std::sin(0.025), 1e-6);
}

TEST(RopeTest, ScoresDependOnlyOnRelativePosition) {
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalves}) {
    const Rope rope(8, 8, 10000.0f, style);
    const std::vector<float> q0 = Ramp(8);
    std::vector<float> k0 = Ramp(8);
    for (float& v : k0) v = -v * 0.5f + 0.1f;
    auto score = [&](int m, int n) {
      std::vector<float> q = q0, k = k0;
      rope.Apply(q, m);
      rope.Apply(k, n);
      double s = 0;
      for (int i = 0; i < 8; ++i) s += q[i] * k[i];
      return s;
    };
    EXPECT_NEAR(score(5, 2), score(103, 100), 1e-5);
    EXPECT_NEAR(score(9, 9), score(0, 0), 1e-5);
  }
}

}  // namespace
}  // namespace kvserve::backends::kernels
