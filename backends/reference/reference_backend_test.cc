#include "backends/reference/reference_backend.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "backends/kernels/matvec.h"
#include "backends/kernels/ops.h"
#include "backends/kv_arena.h"
#include "backends/testing/random_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::backends {
namespace {

using model::DType;
using model::KvLayout;
using ::testing::HasSubstr;

std::unique_ptr<model::Model> RandomModel(bool tied = false) {
  testing::RandomModelOptions options;
  options.tied = tied;
  options.seed = 7;
  auto m = testing::MakeRandomModel(options);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

TEST(CreateBackendTest, CreatesReferenceAndRejectsUnknownNames) {
  auto m = RandomModel();
  const KvLayout layout = KvLayout::ForModel(m->config(), 16, DType::kF32);
  auto backend = CreateBackend("reference", *m, layout, BackendOptions{});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "reference");
  EXPECT_EQ((*backend)->kv_layout().block_tokens, 16);
  auto unknown = CreateBackend("gpu", *m, layout, BackendOptions{});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
}

TEST(CreateBackendTest, RejectsLayoutThatDoesNotFitTheModel) {
  auto m = RandomModel();
  KvLayout layout = KvLayout::ForModel(m->config(), 16, DType::kF32);
  for (auto mutate : std::vector<void (*)(KvLayout&)>{
           [](KvLayout& l) { l.kv_dim += 1; }, [](KvLayout& l) { l.n_layers = 1; },
           [](KvLayout& l) { l.block_tokens = 0; }, [](KvLayout& l) { l.dtype = DType::kBF16; }}) {
    KvLayout bad = layout;
    mutate(bad);
    EXPECT_EQ(ReferenceBackend::Create(*m, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

class InvalidBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = RandomModel();
    layout_ = KvLayout::ForModel(model_->config(), 4, DType::kF32);
    auto b = ReferenceBackend::Create(*model_, layout_);
    ASSERT_TRUE(b.ok());
    backend_ = std::move(*b);
    arena_ = std::make_unique<KvArena>(layout_);
    good_blocks_ = arena_->Allocate(8);
    bad_blocks_ = arena_->Allocate(8);
    logits_.assign(2 * model_->config().vocab_size, 0.0f);
  }

  // Sequence 0 is valid; sequence 1 is what the test makes of it.
  absl::Status Run(SequenceInput second) {
    Batch batch;
    batch.sequences.push_back(SequenceInput{good_tokens_, 0, good_blocks_, true});
    batch.sequences.push_back(second);
    return backend_->Forward(batch, logits_);
  }

  bool GoodBlocksUntouched() const {
    for (uint8_t* block : good_blocks_) {
      for (size_t i = 0; i < layout_.block_bytes(); ++i) {
        if (block[i] != 0) return false;
      }
    }
    return true;
  }

  std::unique_ptr<model::Model> model_;
  KvLayout layout_;
  std::unique_ptr<ReferenceBackend> backend_;
  std::unique_ptr<KvArena> arena_;
  std::span<uint8_t*const> good_blocks_, bad_blocks_;
  std::vector<int32_t> good_tokens_ = {1, 5, 9};
  std::vector<float> logits_;
};

TEST_F(InvalidBatchTest, EachProblemIsInvalidArgumentNamingTheSequence) {
  const std::vector<int32_t> empty;
  const std::vector<int32_t> too_big = {3, 64};
  const std::vector<int32_t> negative = {-1};
  const std::vector<int32_t> ok = {3, 4};
  const std::vector<int32_t> long_prompt(9, 3);
  std::vector<uint8_t*> with_null(bad_blocks_.begin(), bad_blocks_.end());
  with_null[0] = nullptr;
  struct Case {
    SequenceInput seq;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{empty, 0, bad_blocks_, true}, "no new tokens"},
      {{too_big, 0, bad_blocks_, true}, "token 1 has id 64"},
      {{negative, 0, bad_blocks_, true}, "token 0 has id -1"},
      {{ok, 127, std::span<uint8_t* const>(), true}, "context length 128"},
      {{ok, -1, bad_blocks_, true}, "cached_tokens is negative"},
      {{long_prompt, 0, bad_blocks_, true}, "cannot hold 9 positions"},
      {{ok, 0, with_null, true}, "KV block 0 is null"},
  };
  for (const Case& c : cases) {
    absl::Status s = Run(c.seq);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr("sequence 1: ")) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << s;
    EXPECT_TRUE(GoodBlocksUntouched()) << "a rejected batch must not write KV";
  }
}

TEST_F(InvalidBatchTest, LogitsTooSmall) {
  Batch batch;
  batch.sequences.push_back(SequenceInput{good_tokens_, 0, good_blocks_, true});
  std::vector<float> small(model_->config().vocab_size - 1);
  EXPECT_EQ(backend_->Forward(batch, small).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(GoodBlocksUntouched());
}

TEST_F(InvalidBatchTest, EmptyBatchIsOk) {
  EXPECT_TRUE(backend_->Forward(Batch{}, std::span<float>()).ok());
}

TEST(ReferenceBackendTest, WantLogitsFalseLeavesRowUntouched) {
  auto m = RandomModel();
  const KvLayout layout = KvLayout::ForModel(m->config(), 16, DType::kF32);
  auto backend = ReferenceBackend::Create(*m, layout);
  ASSERT_TRUE(backend.ok());
  KvArena arena(layout);
  const std::vector<int32_t> a = {1, 2, 3}, b = {4, 5};
  Batch batch;
  batch.sequences.push_back(SequenceInput{a, 0, arena.Allocate(3), false});
  batch.sequences.push_back(SequenceInput{b, 0, arena.Allocate(2), true});
  const int V = m->config().vocab_size;
  std::vector<float> logits(2 * V, 42.0f);
  ASSERT_TRUE((*backend)->Forward(batch, logits).ok());
  for (int i = 0; i < V; ++i) ASSERT_EQ(logits[i], 42.0f);
  for (int i = V; i < 2 * V; ++i) ASSERT_NE(logits[i], 42.0f);
}

// With a single token at position 0, attention over one position returns that
// position's V, so query head h outputs V of KV head h / group. This checks the wiring
// (norms, GQA mapping, residuals, FFN, tied head) against the kernels used by hand.
TEST(ReferenceBackendTest, FirstTokenMatchesHandWiredKernels) {
  for (bool tied : {false, true}) {
    auto m = RandomModel(tied);
    const model::ModelConfig& c = m->config();
    const model::ModelWeights& w = m->weights();
    EXPECT_EQ(w.output.data == w.token_embedding.data, tied);
    const KvLayout layout = KvLayout::ForModel(c, 16, DType::kF32);
    auto backend = ReferenceBackend::Create(*m, layout);
    ASSERT_TRUE(backend.ok());
    KvArena arena(layout);
    const std::vector<int32_t> token = {11};
    Batch batch;
    batch.sequences.push_back(SequenceInput{token, 0, arena.Allocate(1), true});
    std::vector<float> logits(c.vocab_size);
    ASSERT_TRUE((*backend)->Forward(batch, logits).ok());

    std::vector<float> x(c.dim), xb(c.dim), v(c.kv_dim()), att(c.q_dim()), o(c.dim);
    std::vector<float> gate(c.ffn_dim), up(c.ffn_dim);
    kernels::RowToFloat(w.token_embedding, 11, x);
    const int group = c.n_heads / c.n_kv_heads;
    for (const model::LayerWeights& L : w.layers) {
      kernels::RmsNorm(x, kernels::F32Values(L.attn_norm), c.rms_eps, xb);
      kernels::MatVec(L.wv, xb, v);
      for (int h = 0; h < c.n_heads; ++h) {
        for (int i = 0; i < c.head_dim; ++i) {
          att[h * c.head_dim + i] = v[(h / group) * c.head_dim + i];
        }
      }
      kernels::MatVec(L.wo, att, o);
      kernels::AddInPlace(x, o);
      kernels::RmsNorm(x, kernels::F32Values(L.ffn_norm), c.rms_eps, xb);
      kernels::MatVec(L.w_gate, xb, gate);
      kernels::MatVec(L.w_up, xb, up);
      for (int i = 0; i < c.ffn_dim; ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      kernels::MatVec(L.w_down, gate, o);
      kernels::AddInPlace(x, o);
    }
    kernels::RmsNorm(x, kernels::F32Values(w.output_norm), c.rms_eps, x);
    std::vector<float> want(c.vocab_size);
    kernels::MatVec(w.output, x, want);
    for (int i = 0; i < c.vocab_size; ++i) EXPECT_NEAR(logits[i], want[i], 1e-5) << i;
  }
}

}  // namespace
}  // namespace kvserve::backends
