#include "bench/model_runner.h"

#include <memory>

#include "backends/backend.h"
#include "backends/testing/random_model.h"
#include "gtest/gtest.h"

namespace kvserve::bench {
namespace {

std::unique_ptr<model::Model> TinyModel(model::DType dtype, bool tied) {
  backends::testing::RandomModelOptions o;
  o.dtype = dtype;
  o.tied = tied;
  absl::StatusOr<std::unique_ptr<model::Model>> m = backends::testing::MakeRandomModel(o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// The reference backend over `m`, KV blocks of 16 f32 positions; null on failure.
std::unique_ptr<backends::Backend> ReferenceBackend(const model::Model& m) {
  const model::KvLayout layout = model::KvLayout::ForModel(m.config(), 16, model::DType::kF32);
  absl::StatusOr<std::unique_ptr<backends::Backend>> b =
      backends::CreateBackend("reference", m, layout, backends::BackendOptions{});
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

TEST(WeightBytesPerTokenTest, CountsEveryMatrixOnceAndOneEmbeddingRow) {
  for (bool tied : {false, true}) {
    std::unique_ptr<model::Model> m = TinyModel(model::DType::kBF16, tied);
    ASSERT_NE(m, nullptr);
    const model::ModelConfig& c = m->config();
    const uint64_t per_layer =
        static_cast<uint64_t>(c.dim) * (2 * c.q_dim() + 2 * c.kv_dim()) + 3ull * c.dim * c.ffn_dim;
    const uint64_t elements = c.n_layers * per_layer + uint64_t(c.vocab_size) * c.dim + c.dim;
    EXPECT_EQ(WeightBytesPerToken(m->weights()), 2 * elements) << "tied=" << tied;
    EXPECT_EQ(MatrixDType(m->weights()), model::DType::kBF16);
  }
}

TEST(WeightBytesPerTokenTest, CountsTheRouterAndTheUsedExpertsOnly) {
  backends::testing::RandomModelOptions options;
  for (const backends::testing::NamedConfig& named : backends::testing::ArchitectureConfigs()) {
    if (named.name == "qwen3moe") options.config = named.config;
  }
  ASSERT_TRUE(options.config.moe());
  auto m = backends::testing::MakeRandomModel(options);  // f32
  ASSERT_TRUE(m.ok()) << m.status();
  const model::ModelConfig& c = (*m)->config();
  const uint64_t per_layer = static_cast<uint64_t>(c.dim) * (2 * c.q_dim() + 2 * c.kv_dim()) +
                             uint64_t(c.n_experts) * c.dim +
                             uint64_t(c.n_experts_used) * 3 * c.dim * c.ffn_dim;
  const uint64_t elements = c.n_layers * per_layer + uint64_t(c.vocab_size) * c.dim + c.dim;
  EXPECT_EQ(WeightBytesPerToken((*m)->weights(), c.n_experts_used), 4 * elements);
}

TEST(ModelRunnerTest, MeasuresPrefillAndDecodeOnTheReferenceBackend) {
  std::unique_ptr<model::Model> m = TinyModel(model::DType::kF32, false);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<backends::Backend> b = ReferenceBackend(*m);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<std::vector<double>> prefill = MeasurePrefill(*b, *m, 20, 2, 1);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  ASSERT_EQ(prefill->size(), 2u);
  for (double v : *prefill) EXPECT_GT(v, 0.0);
  absl::StatusOr<std::vector<double>> decode = MeasureDecode(*b, *m, 3, 4, 5, 2, 1);
  ASSERT_TRUE(decode.ok()) << decode.status();
  ASSERT_EQ(decode->size(), 2u);
  for (double v : *decode) EXPECT_GT(v, 0.0);
}

TEST(ModelRunnerTest, RejectsCountsBeyondTheContext) {
  std::unique_ptr<model::Model> m = TinyModel(model::DType::kF32, false);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<backends::Backend> b = ReferenceBackend(*m);
  ASSERT_NE(b, nullptr);
  const int context = m->config().context_length;
  EXPECT_EQ(MeasurePrefill(*b, *m, context + 1, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureDecode(*b, *m, 1, 4, context - 4, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureDecode(*b, *m, 0, 4, 4, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasurePrefill(*b, *m, 4, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::bench
