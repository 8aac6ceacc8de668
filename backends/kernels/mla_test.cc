#include "backends/kernels/mla.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backends/kv_arena.h"
#include "backends/testing/random_model.h"
#include "gtest/gtest.h"

namespace kvserve::backends::kernels {
namespace {

using model::DType;

// The small latent attention shape of the architecture tests (4 heads of 6 + 4
// dimensions, values of 8, a latent of 16).
model::ModelConfig Shape() {
  for (const testing::NamedConfig& named : testing::ArchitectureConfigs()) {
    if (named.name == "deepseek2") return named.config;
  }
  return {};
}

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The absorbed form equals the decompressed one: same scores, weights and outputs up to
// float rounding, for full and windowed attention, f32 and f16 rows.
TEST(LatentAttentionTest, AbsorbedEqualsDecompressed) {
  const model::ModelConfig c = Shape();
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  std::mt19937 rng(38);
  const int r = c.kv_lora_rank, nope = c.head_dim - c.rope_dim;
  const std::vector<float> wk_b = Random(static_cast<size_t>(c.n_heads * r * nope), rng);
  const std::vector<float> wv_b = Random(static_cast<size_t>(c.n_heads * c.v_head_dim * r), rng);
  model::LayerWeights L;
  L.wk_b = {DType::kF32, wk_b.data(), c.n_heads * r, nope};
  L.wv_b = {DType::kF32, wv_b.data(), c.n_heads * c.v_head_dim, r};
  constexpr int kPositions = 11;
  for (DType kv_type : {DType::kF32, DType::kF16}) {
    const model::KvLayout layout = model::KvLayout::ForModel(c, 4, kv_type);
    ASSERT_EQ(layout.planes, 1);
    KvArena arena(layout);
    const SequenceKv kv(layout, arena.Allocate(kPositions));
    for (int p = 0; p < kPositions; ++p) {
      kv.Write(0, KvKind::kKey, p, Random(static_cast<size_t>(c.kv_dim()), rng));
    }
    const std::vector<float> q = Random(static_cast<size_t>(c.q_dim()), rng);
    for (int first_pos : {0, 5}) {
      SCOPED_TRACE(::testing::Message() << model::DTypeName(kv_type) << " first_pos " << first_pos);
      LatentScratch scratch;
      std::vector<float> want(static_cast<size_t>(c.attn_out_dim()));
      std::vector<float> got(want.size());
      AttendLatentDecompressed(c, L, kv, 0, first_pos, kPositions, q, scratch, want);
      AttendLatentAbsorbed(c, L, kv, 0, first_pos, kPositions, q, scratch, got);
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-4f * std::max(1.0f, std::fabs(want[i]))) << i;
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::backends::kernels
