// The reference backend against the independent textbook forward pass (double
// precision, explicit mask) for every architecture feature set: biases, Q/K norms, RoPE
// factors and scaling, rotate-halves RoPE, and local attention with the blocks before the
// window taken away (null) as the KV cache does.
//
// Tolerance: the reference computes in float; over 2 layers of these small models the
// difference to double stays near 1e-6 relative, so 1e-4 of max(1, max|logit|) leaves
// room while any formula slip (a missing bias, a wrong RoPE pairing, an off-by-one
// window) moves logits by far more.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "backends/kv_arena.h"
#include "backends/reference/reference_backend.h"
#include "backends/testing/random_model.h"
#include "backends/testing/textbook_forward.h"
#include "gtest/gtest.h"

namespace kvserve::backends {
namespace {

using model::DType;
using model::KvLayout;

class ReferenceArchTest : public ::testing::TestWithParam<testing::NamedConfig> {};

TEST_P(ReferenceArchTest, EveryDecodeStepMatchesTheTextbookPass) {
  testing::RandomModelOptions options;
  options.config = GetParam().config;
  options.seed = 11;
  absl::StatusOr<std::unique_ptr<model::Model>> m = testing::MakeRandomModel(options);
  ASSERT_TRUE(m.ok()) << m.status();
  const model::ModelConfig& c = (*m)->config();
  const KvLayout layout = KvLayout::ForModel(c, 4, DType::kF32);
  absl::StatusOr<std::unique_ptr<ReferenceBackend>> backend = ReferenceBackend::Create(**m, layout);
  ASSERT_TRUE(backend.ok()) << backend.status();

  constexpr int kTokens = 24;
  std::vector<int32_t> tokens(kTokens);
  for (int t = 0; t < kTokens; ++t) tokens[t] = (t * 37 + 5) % c.vocab_size;
  absl::StatusOr<std::vector<double>> want = testing::TextbookForward(**m, tokens);
  ASSERT_TRUE(want.ok()) << want.status();

  KvArena arena(layout);
  const std::span<uint8_t* const> owned = arena.Allocate(kTokens);
  std::vector<uint8_t*> blocks(owned.begin(), owned.end());
  std::vector<float> logits(c.vocab_size);
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  for (int t = 0; t < kTokens; ++t) {
    // Blocks wholly before this token's window are gone, as the KV cache frees them.
    for (int b = 0; (b + 1) * layout.block_tokens <= c.FirstVisiblePosition(t); ++b) {
      blocks[b] = nullptr;
    }
    Batch batch;
    batch.sequences.push_back(
        SequenceInput{std::span<const int32_t>(&tokens[t], 1), t, blocks, true});
    ASSERT_TRUE((*backend)->Forward(batch, logits).ok());
    double max_abs = 1.0, max_diff = 0.0;
    for (size_t i = 0; i < vocab; ++i) {
      const double w = (*want)[t * vocab + i];
      max_abs = std::max(max_abs, std::fabs(w));
      max_diff = std::max(max_diff, std::fabs(logits[i] - w));
    }
    EXPECT_LT(max_diff / max_abs, 1e-4) << "position " << t;
  }
  if (c.sliding_window > 0) {
    EXPECT_EQ(blocks[0], nullptr);  // the test did take blocks away
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, ReferenceArchTest,
                         ::testing::ValuesIn(testing::ArchitectureConfigs()),
                         [](const auto& info) { return info.param.name; });

TEST(ReferenceArchTest, TheWindowChangesTheResult) {
  // Guards the test above: with the window the logits differ from full attention, so a
  // backend ignoring sliding_window would fail it.
  testing::RandomModelOptions options;
  options.seed = 11;
  options.config.sliding_window = 5;
  auto local = testing::MakeRandomModel(options);
  options.config.sliding_window = 0;
  auto full = testing::MakeRandomModel(options);
  ASSERT_TRUE(local.ok() && full.ok());
  std::vector<int32_t> tokens(12);
  for (int t = 0; t < 12; ++t) tokens[t] = (t * 37 + 5) % 64;
  auto a = testing::TextbookForward(**local, tokens);
  auto b = testing::TextbookForward(**full, tokens);
  ASSERT_TRUE(a.ok() && b.ok());
  double diff = 0;
  for (size_t i = 11 * 64; i < 12 * 64; ++i) diff = std::max(diff, std::fabs((*a)[i] - (*b)[i]));
  EXPECT_GT(diff, 1e-3);
}

}  // namespace
}  // namespace kvserve::backends
