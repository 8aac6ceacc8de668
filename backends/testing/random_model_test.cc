#include "backends/testing/random_model.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::backends::testing {
namespace {

using model::DType;

TEST(RandomModelTest, SameSeedSameModelOtherSeedOtherModel) {
  RandomModelOptions options;
  auto a = MakeRandomModel(options);
  auto b = MakeRandomModel(options);
  options.seed = 2;
  auto c = MakeRandomModel(options);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ((*a)->fingerprint(), (*b)->fingerprint());
  EXPECT_NE((*a)->fingerprint(), (*c)->fingerprint());
  EXPECT_EQ((*a)->config().n_kv_heads, 2);
  EXPECT_EQ((*a)->config().n_heads, 4);
}

TEST(RandomModelTest, DtypeAndTying) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    for (bool tied : {false, true}) {
      RandomModelOptions options;
      options.dtype = dtype;
      options.tied = tied;
      auto m = MakeRandomModel(options);
      ASSERT_TRUE(m.ok()) << m.status();
      const model::ModelWeights& w = (*m)->weights();
      EXPECT_EQ(w.token_embedding.type, dtype);
      EXPECT_EQ(w.layers[1].w_down.type, dtype);
      EXPECT_EQ(w.layers[0].attn_norm.type, DType::kF32);
      EXPECT_EQ((*m)->config().tied_embeddings, tied);
      EXPECT_EQ(w.output.data == w.token_embedding.data, tied);
      EXPECT_EQ((*m)->vocab().size(), (*m)->config().vocab_size);
    }
  }
}

TEST(RandomModelTest, BadShapeIsAnError) {
  RandomModelOptions options;
  options.dtype = DType::kQ8_0;
  options.config.ffn_dim = 40;  // not a multiple of 32
  EXPECT_EQ(MakeRandomModel(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.dtype = DType::kF32;
  options.config.n_kv_heads = 3;  // 4 heads are not a multiple of 3
  EXPECT_EQ(MakeRandomModel(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EncodeRowTest, Q8_0RoundTripsWithinHalfAStep) {
  std::vector<float> values(64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.37f * static_cast<float>(i % 13) - 2.0f;
  const std::vector<uint8_t> bytes = EncodeRow(values, DType::kQ8_0);
  ASSERT_EQ(bytes.size(), 68u);
  for (int b = 0; b < 2; ++b) {
    uint16_t d16;
    std::memcpy(&d16, bytes.data() + 34 * b, 2);
    const float d = model::HalfToFloat(d16);
    for (int j = 0; j < 32; ++j) {
      const float v = d * static_cast<float>(static_cast<int8_t>(bytes[34 * b + 2 + j]));
      EXPECT_NEAR(v, values[32 * b + j], d * 0.5f + 2e-3f) << b << " " << j;
    }
  }
}

}  // namespace
}  // namespace kvserve::backends::testing
