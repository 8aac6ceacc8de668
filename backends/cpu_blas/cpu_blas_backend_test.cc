// cpu_blas against the reference backend (the oracle), batch invariance, forced kernel
// levels, and input errors.
//
// Tolerance. The two backends compute the same formulas; only the summation order of
// dot products differs (8/16 SIMD lanes and several accumulators, sgemm blocking). Each
// product then differs by float rounding (about 1e-7 relative per term); through a few
// layers of norms and softmax that stays below 1e-4 relative to the logit scale on these
// models (measured about 1e-6..1e-5). kLogitTolerance is |diff| / max(1, max|logit|).
#include "backends/cpu_blas/cpu_blas_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backends/backend.h"
#include "backends/kernels/ops.h"
#include "backends/kv_arena.h"
#include "backends/reference/reference_backend.h"
#include "backends/testing/random_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/panels.h"
#include "model/tokenizer.h"

namespace kvserve::backends {
namespace {

using cpu_blas::Isa;
using model::DType;
using model::KvLayout;
using ::testing::HasSubstr;

constexpr float kLogitTolerance = 1e-4f;

// With quantized weights cpu_blas also quantizes each activation row to 8 bits per block
// of 32 or 256 (q8_activations.h), as llama.cpp does, while the reference multiplies the
// decoded weights with float activations. One product then moves by up to 0.4 % of
// sum |w x| (half a step of 1/127 of the block's max), partly cancelling over a row.
// On these random models the logits differ by up to 1.4e-2 of their scale with the
// k-quants (activation blocks of 256, so coarser steps than q8_0's and q4_0's 32) at
// every kernel level alike, scalar included (measured); the tolerance leaves 2x margin.
// simd_kernels_test checks each product against its exact bound.
constexpr float kQuantLogitTolerance = 3e-2f;

// With bf16 weights on the avx512bf16 level cpu_blas rounds the activations to bf16
// (KernelSet::matmul_bf16_dot: each product moves by up to 2^-8 sum |w x|), while the
// reference multiplies float activations. Measured on these random models: up to 3.1e-3
// of the logit scale; the tolerance leaves 3x margin.
constexpr float kBf16DotLogitTolerance = 1e-2f;

// The tolerance against the reference for a model of `weights` run at kernel level `isa`.
float ToleranceFor(DType weights, Isa isa = cpu_blas::BestIsa()) {
  if (model::IsQuantized(weights)) return kQuantLogitTolerance;
  if (weights == DType::kBF16 && cpu_blas::KernelsFor(isa).matmul_bf16_dot != nullptr) {
    return kBf16DotLogitTolerance;
  }
  return kLogitTolerance;
}

// max |a - b| / max(1, max |b|); infinite when the sizes differ or either side holds
// a NaN or an infinity (a NaN never equals a NaN here).
float RelativeDiff(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return INFINITY;
  float max_abs = 1.0f;
  float max_diff = 0.0f;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    max_abs = std::max(max_abs, std::fabs(b[i]));
    max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
  }
  return max_diff / max_abs;
}

// A wider model than the default, so that rows are longer than one vector (tails
// included: ffn 100 and vocab 300 are not multiples of 16).
model::ModelConfig WideConfig() {
  model::ModelConfig c = testing::RandomModelOptions::DefaultConfig();
  c.dim = 64;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.rope_dim = 16;
  c.ffn_dim = 100;
  c.vocab_size = 300;
  c.context_length = 256;
  return c;
}

// Rows that are whole q4_K / q6_K super-blocks (256): dim 256, ffn 512.
model::ModelConfig QuantConfig() {
  model::ModelConfig c = WideConfig();
  c.dim = 256;
  c.n_layers = 2;
  c.head_dim = 64;
  c.rope_dim = 64;
  c.ffn_dim = 512;
  return c;
}

std::unique_ptr<model::Model> MakeModel(DType dtype, bool tied, model::ModelConfig config,
                                        uint64_t seed = 3) {
  testing::RandomModelOptions options;
  options.config = config;
  options.dtype = dtype;
  options.tied = tied;
  options.seed = seed;
  auto m = testing::MakeRandomModel(options);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// One backend plus the KV of the sequences it runs, driven step by step. With a sliding
// window, the blocks wholly before a step's window are nulled first, as the KV cache
// gives them back to the pool: a backend that read them would crash.
class Driver {
 public:
  Driver(std::unique_ptr<Backend> backend, const model::Model& m)
      : backend_(std::move(backend)),
        arena_(backend_->kv_layout()),
        config_(m.config()),
        vocab_(m.config().vocab_size),
        context_(m.config().context_length) {}

  int AddSequence() {
    const std::span<uint8_t* const> owned = arena_.Allocate(context_);
    blocks_.emplace_back(owned.begin(), owned.end());
    cached_.push_back(0);
    return static_cast<int>(blocks_.size()) - 1;
  }

  struct Step {
    int seq;
    std::vector<int32_t> tokens;
    bool want_logits = true;
  };

  // Runs one Forward over `steps`; returns logits [steps.size(), vocab].
  std::vector<float> Run(const std::vector<Step>& steps) {
    Batch batch;
    const int bt = backend_->kv_layout().block_tokens;
    for (const Step& s : steps) {
      const int first = config_.FirstVisiblePosition(cached_[s.seq]);
      for (int b = 0; (b + 1) * bt <= first; ++b) blocks_[s.seq][b] = nullptr;
      batch.sequences.push_back(
          SequenceInput{s.tokens, cached_[s.seq], blocks_[s.seq], s.want_logits});
    }
    std::vector<float> logits(steps.size() * vocab_, 0.0f);
    const absl::Status status = backend_->Forward(batch, logits);
    EXPECT_TRUE(status.ok()) << status;
    for (const Step& s : steps) cached_[s.seq] += static_cast<int32_t>(s.tokens.size());
    return logits;
  }

  Backend& backend() { return *backend_; }

 private:
  std::unique_ptr<Backend> backend_;
  KvArena arena_;
  const model::ModelConfig& config_;
  size_t vocab_;
  int context_;
  std::vector<std::vector<uint8_t*>> blocks_;
  std::vector<int32_t> cached_;
};

std::unique_ptr<Backend> MakeCpuBlas(const model::Model& m, const KvLayout& layout,
                                     const CpuBlasOptions& options = CpuBlasOptions{}) {
  auto b = CpuBlasBackend::Create(m, layout, options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

std::unique_ptr<Backend> MakeReference(const model::Model& m, const KvLayout& layout) {
  auto b = ReferenceBackend::Create(m, layout);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

std::vector<int32_t> Tokens(int n, int vocab, int salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + salt * 11 + 5) % vocab;
  return t;
}

// A mixed schedule over three sequences: prefills of 13, 3 and 1 tokens (one split into
// a chunk without logits), then decode steps of all three together.
std::vector<std::vector<Driver::Step>> MixedSchedule(int vocab) {
  std::vector<std::vector<Driver::Step>> schedule = {
      {{0, Tokens(9, vocab, 1), false}, {1, Tokens(3, vocab, 2)}, {2, Tokens(1, vocab, 3)}},
      {{0, Tokens(4, vocab, 4)}},
  };
  for (int step = 0; step < 6; ++step) {
    schedule.push_back({{0, {(step * 7 + 1) % vocab}},
                        {1, {(step * 5 + 2) % vocab}},
                        {2, {(step * 3 + 3) % vocab}}});
  }
  return schedule;
}

// The logits of every step of MixedSchedule on one driver (three new sequences), step
// after step: what a backend is compared by. The reference's run is computed once and
// compared with every kernel level and path of the same model.
using ScheduleLogits = std::vector<std::vector<float>>;

ScheduleLogits RunSchedule(std::unique_ptr<Backend> backend, const model::Model& m) {
  Driver d(std::move(backend), m);
  for (int i = 0; i < 3; ++i) d.AddSequence();
  ScheduleLogits out;
  for (const auto& steps : MixedSchedule(m.config().vocab_size)) out.push_back(d.Run(steps));
  return out;
}

// The largest relative difference between two runs of MixedSchedule over every logits row
// the schedule asks for.
float MaxDiff(const ScheduleLogits& a, const ScheduleLogits& b, int vocab) {
  const std::vector<std::vector<Driver::Step>> schedule = MixedSchedule(vocab);
  EXPECT_EQ(a.size(), schedule.size());
  EXPECT_EQ(b.size(), schedule.size());
  float worst = 0.0f;
  for (size_t k = 0; k < schedule.size() && k < a.size() && k < b.size(); ++k) {
    const std::vector<Driver::Step>& steps = schedule[k];
    for (size_t i = 0; i < steps.size(); ++i) {
      if (!steps[i].want_logits) continue;
      const std::span<const float> ra(a[k].data() + i * vocab, vocab);
      const std::span<const float> rb(b[k].data() + i * vocab, vocab);
      worst = std::max(worst, RelativeDiff(ra, rb));
    }
  }
  return worst;
}

struct ParityCase {
  DType dtype;
  bool tied;
  DType kv_dtype;
  bool wide;  // WideConfig() (QuantConfig() for the k-quants), else the default config
};

class ParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(ParityTest, LogitsMatchReference) {
  const ParityCase& p = GetParam();
  const bool k_quant = model::DTypeBlockElems(p.dtype) == model::kQKBlockElems;
  auto m = MakeModel(p.dtype, p.tied,
                     k_quant  ? QuantConfig()
                     : p.wide ? WideConfig()
                              : testing::RandomModelOptions::DefaultConfig());
  ASSERT_NE(m, nullptr);
  const KvLayout layout = KvLayout::ForModel(m->config(), 4, p.kv_dtype);
  CpuBlasOptions options;
  options.threads = 2;
  EXPECT_LE(MaxDiff(RunSchedule(MakeCpuBlas(*m, layout, options), *m),
                    RunSchedule(MakeReference(*m, layout), *m), m->config().vocab_size),
            ToleranceFor(p.dtype));
}

// Every architecture feature set (biases, Q/K norms, RoPE factors and scaling, rotate
// halves, local attention with the blocks before the window gone), f32 and f16 KV, every
// kernel level the CPU has, with and without batch invariance: without it the schedule's
// 9-token chunk takes the sgemm attention path, decode rows (and every row with it) the
// paged one.
class ArchParityTest : public ::testing::TestWithParam<std::tuple<testing::NamedConfig, DType>> {};

TEST_P(ArchParityTest, LogitsMatchReference) {
  const auto& [named, kv_dtype] = GetParam();
  auto m = MakeModel(DType::kF32, false, named.config);
  ASSERT_NE(m, nullptr);
  const KvLayout layout = KvLayout::ForModel(m->config(), 4, kv_dtype);
  const ScheduleLogits ref = RunSchedule(MakeReference(*m, layout), *m);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    if (!cpu_blas::IsaSupported(isa)) continue;  // EveryKernelLevelAndPath... notes it
    for (bool invariant : {true, false}) {
      SCOPED_TRACE(std::string(cpu_blas::IsaName(isa)) + (invariant ? " invariant" : ""));
      CpuBlasOptions options;
      options.threads = 2;
      options.isa = isa;
      options.gemm.batch_invariant = invariant;
      EXPECT_LE(
          MaxDiff(RunSchedule(MakeCpuBlas(*m, layout, options), *m), ref, m->config().vocab_size),
          kLogitTolerance);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, ArchParityTest,
                         ::testing::Combine(::testing::ValuesIn(testing::ArchitectureConfigs()),
                                            ::testing::Values(DType::kF32, DType::kF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name +
                                  (std::get<1>(info.param) == DType::kF32 ? "_kvf32" : "_kvf16");
                         });

INSTANTIATE_TEST_SUITE_P(Dtypes, ParityTest,
                         ::testing::Values(ParityCase{DType::kF32, false, DType::kF32, false},
                                           ParityCase{DType::kF32, false, DType::kF32, true},
                                           ParityCase{DType::kF32, true, DType::kF16, true},
                                           ParityCase{DType::kF16, false, DType::kF32, true},
                                           ParityCase{DType::kF16, true, DType::kF16, true},
                                           ParityCase{DType::kBF16, false, DType::kF16, true},
                                           ParityCase{DType::kBF16, true, DType::kF32, true},
                                           ParityCase{DType::kQ8_0, false, DType::kF32, false},
                                           ParityCase{DType::kQ4_0, false, DType::kF32, false},
                                           ParityCase{DType::kQ4_0, true, DType::kF16, false},
                                           ParityCase{DType::kQ5_0, false, DType::kF16, false},
                                           ParityCase{DType::kQ5_1, true, DType::kF32, false},
                                           ParityCase{DType::kQ4_K, false, DType::kF16, true},
                                           ParityCase{DType::kQ5_K, true, DType::kF16, true},
                                           ParityCase{DType::kQ6_K, true, DType::kF32, true}),
                         [](const ::testing::TestParamInfo<ParityCase>& info) {
                           const ParityCase& p = info.param;
                           return std::string(model::DTypeName(p.dtype)) + (p.tied ? "_tied" : "") +
                                  "_kv" + std::string(model::DTypeName(p.kv_dtype)) +
                                  (p.wide ? "_wide" : "_default");
                         });

// Each kernel level (forced), each product path (streaming kernels only, interleaved from
// 2 rows for quantized weights, with and without the panel layouts (f32, bf16 and the
// quantized weights packed by the backend where the level reads them); sgemm only), and several
// thread counts agree with the reference.
TEST(CpuBlasBackendTest, EveryKernelLevelAndPathMatchesReference) {
  // kPanelsFma: bf16 panels through matmul_bf16_panels_fma (kPanels: vdpbf16ps);
  // kPanelsExact: bf16 panels at avx512bf16 with bf16_dot off (matmul_bf16_panels_exact,
  // which kPanels runs below avx512bf16).
  enum Path { kPanels, kPanelsFma, kPanelsExact, kRows, kSgemm };
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                      DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    auto m = MakeModel(dtype, false, model::IsQuantized(dtype) ? QuantConfig() : WideConfig());
    ASSERT_NE(m, nullptr);
    const KvLayout layout = KvLayout::ForModel(m->config(), 8, DType::kF16);
    const ScheduleLogits ref = RunSchedule(MakeReference(*m, layout), *m);
    for (Isa isa : cpu_blas::kAllIsas) {
      if (!cpu_blas::IsaSupported(isa)) {
        // Said in the output (the per-level kernel tests show as "Skipped" in CTest).
        std::printf("[  NOTE    ] %s not on this CPU: not compared\n",
                    std::string(cpu_blas::IsaName(isa)).c_str());
        continue;
      }
      for (Path path : {kPanels, kPanelsFma, kPanelsExact, kRows, kSgemm}) {
        // Only the types with a panel layout differ between kPanels and kRows.
        if (path == kRows && model::PanelLayoutOf(dtype) == model::Layout::kRows) continue;
        if ((path == kPanelsFma || path == kPanelsExact) &&
            (dtype != DType::kBF16 || isa != cpu_blas::Isa::kAvx512Bf16)) {
          continue;
        }
        for (int threads : {1, 3}) {
          const int sgemm_min_rows = path == kSgemm ? 1 : 1 << 20;
          SCOPED_TRACE(::testing::Message()
                       << model::DTypeName(dtype) << " " << cpu_blas::IsaName(isa) << " path="
                       << (path == kPanels        ? "panels"
                           : path == kPanelsFma   ? "panels_fma"
                           : path == kPanelsExact ? "panels_exact"
                           : path == kRows        ? "rows"
                                                  : "sgemm")
                       << " threads=" << threads);
          CpuBlasOptions options;
          options.isa = isa;
          options.threads = threads;
          options.gemm.sgemm_min_rows = sgemm_min_rows;
          options.gemm.quant_sgemm_min_rows = sgemm_min_rows;
          // Quantized activations on the caller (1 thread) or on the pool (3 threads).
          options.gemm.quant_parallel_min_elements = threads == 1 ? int64_t{1} << 40 : 1;
          options.gemm.f32_panels = options.gemm.bf16_panels = options.gemm.quant_panels =
              path == kPanels || path == kPanelsFma || path == kPanelsExact;
          options.gemm.bf16_dot = path != kPanelsExact;
          options.gemm.bf16_panel_kernel = path == kPanelsFma ? cpu_blas::Bf16PanelKernel::kFma
                                                              : cpu_blas::Bf16PanelKernel::kDpbf16;
          // (The interleaved layout, bf16 dot and the panels never go to sgemm: off for
          // the sgemm-only pass.)
          if (path == kSgemm) {
            options.gemm.quant_interleave_min_rows = 1 << 20;
            options.gemm.bf16_dot = false;
            options.gemm.batch_invariant = false;  // which never uses sgemm
          }
          auto backend = CpuBlasBackend::Create(*m, layout, options);
          ASSERT_TRUE(backend.ok()) << backend.status();
          EXPECT_EQ((*backend)->isa(), isa);
          EXPECT_EQ((*backend)->threads(), threads);
          // sgemm, and bf16 with bf16_dot off: the f32 products.
          const float tolerance = sgemm_min_rows == 1 || path == kPanelsExact
                                      ? ToleranceFor(DType::kF32)
                                      : ToleranceFor(dtype, isa);
          EXPECT_LE(MaxDiff(RunSchedule(std::move(*backend), *m), ref, m->config().vocab_size),
                    tolerance);
        }
      }
    }
  }
}

// Latent attention (deepseek2) in every weight type whose rows are whole 32-element blocks,
// f32 and f16 KV, at each kernel level (forced): the absorptions into the latent space and
// the value projections run through the Gemm (8-bit activations for the quantized types),
// the attention over the cached latents through dot_rows and axpy_rows
// (latent_attention.h).
TEST(CpuBlasBackendTest, LatentAttentionEveryTypeAndLevelMatchesReference) {
  model::ModelConfig c = WideConfig();
  c.architecture = "deepseek2";
  c.n_kv_heads = 1;
  c.head_dim = 48;  // qk_nope 32 + rope 16
  c.rope_dim = 16;
  c.v_head_dim = 32;
  c.kv_lora_rank = 32;
  c.q_lora_rank = 32;
  c.ffn_dim = 96;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                      DType::kQ5_0, DType::kQ5_1}) {
    auto m = MakeModel(dtype, false, c);
    ASSERT_NE(m, nullptr);
    for (DType kv_dtype : {DType::kF32, DType::kF16}) {
      const KvLayout layout = KvLayout::ForModel(m->config(), 4, kv_dtype);
      const ScheduleLogits ref = RunSchedule(MakeReference(*m, layout), *m);
      for (Isa isa : cpu_blas::kAllIsas) {
        if (!cpu_blas::IsaSupported(isa)) continue;  // EveryKernelLevelAndPath... notes it
        SCOPED_TRACE(::testing::Message()
                     << model::DTypeName(dtype) << " kv " << model::DTypeName(kv_dtype) << " "
                     << cpu_blas::IsaName(isa));
        CpuBlasOptions options;
        options.isa = isa;
        options.threads = 2;
        EXPECT_LE(
            MaxDiff(RunSchedule(MakeCpuBlas(*m, layout, options), *m), ref, m->config().vocab_size),
            ToleranceFor(dtype, isa));
      }
    }
  }
}

// `c` with a mixture of experts instead of the dense FFN: 8 experts of `ffn` hidden units,
// 3 per token (qwen3moe's features).
model::ModelConfig WithExperts(model::ModelConfig c, int ffn) {
  c.architecture = "qwen3moe";
  c.rope_style = model::RopeStyle::kRotateHalves;
  c.qk_norm = true;
  c.n_experts = 8;
  c.n_experts_used = 3;
  c.ffn_dim = ffn;
  return c;
}

// `c` with deepseek2's mixture of experts (DeepSeek-V3's routing): layer 0 dense of
// `ffn` hidden units, then 8 experts of `ffn`, 3 per token, in 4 groups of which 2 are
// kept, 2 shared experts, sigmoid gating with the selection bias, normalized weights
// scaled by 2.5.
model::ModelConfig WithDeepseekExperts(model::ModelConfig c, int ffn) {
  return testing::WithDeepseekV3Routing(WithExperts(c, ffn), ffn);
}

// Mixture-of-experts layers in every weight type, at each kernel level (forced), with and
// without the panel layouts, agree with the reference: the experts' products are the
// dense FFN's kernels on each expert's rows (ffn 96 and 256: whole panels; 100: a tail);
// with qwen3moe's routing and with deepseek2's (leading dense layer, shared experts,
// sigmoid gating, selection bias, groups).
TEST(CpuBlasBackendTest, MixtureOfExpertsEveryTypeAndLevelMatchesReference) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                      DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (auto with : {WithExperts, WithDeepseekExperts}) {
      SCOPED_TRACE(with == WithExperts ? "qwen3moe routing" : "deepseek2 routing");
      const bool k_quant = model::DTypeBlockElems(dtype) == model::kQKBlockElems;
      const model::ModelConfig config = k_quant                     ? with(QuantConfig(), 256)
                                        : model::IsQuantized(dtype) ? with(WideConfig(), 96)
                                                                    : with(WideConfig(), 100);
      auto m = MakeModel(dtype, false, config);
      ASSERT_NE(m, nullptr);
      const KvLayout layout = KvLayout::ForModel(m->config(), 8, DType::kF16);
      const ScheduleLogits ref = RunSchedule(MakeReference(*m, layout), *m);
      for (Isa isa : cpu_blas::kAllIsas) {
        if (!cpu_blas::IsaSupported(isa)) continue;  // EveryKernelLevelAndPath... notes it
        for (bool panels : {true, false}) {
          SCOPED_TRACE(::testing::Message() << model::DTypeName(dtype) << " "
                                            << cpu_blas::IsaName(isa) << (panels ? " panels" : ""));
          CpuBlasOptions options;
          options.isa = isa;
          options.threads = 2;
          options.gemm.f32_panels = options.gemm.bf16_panels = options.gemm.quant_panels = panels;
          EXPECT_LE(MaxDiff(RunSchedule(MakeCpuBlas(*m, layout, options), *m), ref,
                            m->config().vocab_size),
                    ToleranceFor(dtype, isa));
        }
      }
    }
  }
}

// A sequence's logits do not depend on what else shares its steps: run sequence A alone,
// then with two other sequences (one prefilling a long prompt while A decodes); greedy
// tokens must be identical and logits equal within tolerance.
TEST(CpuBlasBackendTest, BatchInvariance) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(model::DTypeName(dtype));
    auto m = MakeModel(dtype, false, WideConfig(), 11);
    ASSERT_NE(m, nullptr);
    const int vocab = m->config().vocab_size;
    const KvLayout layout = KvLayout::ForModel(m->config(), 4, DType::kF32);
    CpuBlasOptions options;
    options.threads = 2;
    options.gemm.batch_invariant = false;

    // Alone: prompt, then 12 greedy steps.
    Driver alone(MakeCpuBlas(*m, layout, options), *m);
    alone.AddSequence();
    std::vector<std::vector<float>> alone_logits;
    std::vector<int32_t> alone_tokens;
    std::vector<float> l = alone.Run({{0, Tokens(6, vocab, 9)}});
    for (int step = 0; step < 12; ++step) {
      alone_logits.push_back(l);
      alone_tokens.push_back(static_cast<int32_t>(kernels::ArgMax(l)));
      l = alone.Run({{0, {alone_tokens.back()}}});
    }

    // Shared: the same, with sequence 1 prefilling 97 tokens in chunks (so the steps have
    // more than GemmOptions::sgemm_min_rows rows and, batch invariance off, take the sgemm
    // path, while A alone takes the streaming kernels) and sequence 2 decoding beside it.
    // (With batch invariance on, the default, the logits are equal bit for bit:
    // batch_invariance_test.)
    Driver shared(MakeCpuBlas(*m, layout, options), *m);
    for (int i = 0; i < 3; ++i) shared.AddSequence();
    l = shared.Run({{1, Tokens(17, vocab, 1)}, {0, Tokens(6, vocab, 9)}, {2, Tokens(2, vocab, 2)}});
    std::vector<float> a(l.begin() + vocab, l.begin() + 2 * vocab);
    for (int step = 0; step < 12; ++step) {
      SCOPED_TRACE(step);
      EXPECT_LE(RelativeDiff(a, alone_logits[step]), kLogitTolerance);
      const int32_t token = static_cast<int32_t>(kernels::ArgMax(a));
      ASSERT_EQ(token, alone_tokens[step]);
      std::vector<Driver::Step> steps = {{2, {(step * 3 + 1) % vocab}}, {0, {token}}};
      if (step < 4) steps.push_back({1, Tokens(20, vocab, step), step == 3});
      l = shared.Run(steps);
      a.assign(l.begin() + vocab, l.begin() + 2 * vocab);
    }
  }
}

TEST(CpuBlasBackendTest, RejectsBadInputWithoutWritingKv) {
  auto m = MakeModel(DType::kF32, false, testing::RandomModelOptions::DefaultConfig());
  ASSERT_NE(m, nullptr);
  const KvLayout layout = KvLayout::ForModel(m->config(), 4, DType::kF32);
  auto backend = MakeCpuBlas(*m, layout);
  KvArena arena(layout);
  std::span<uint8_t* const> blocks = arena.Allocate(16);
  std::vector<float> logits(2 * m->config().vocab_size);
  const std::vector<int32_t> good = {1, 2, 3};
  const std::vector<int32_t> bad = {1, m->config().vocab_size};
  Batch batch;
  batch.sequences.push_back(SequenceInput{good, 0, blocks, true});
  batch.sequences.push_back(SequenceInput{bad, 0, blocks, true});
  const absl::Status s = backend->Forward(batch, logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sequence 1"));
  for (uint8_t* block : blocks) {
    EXPECT_TRUE(std::all_of(block, block + layout.block_bytes(), [](uint8_t b) { return b == 0; }));
  }

  // A block pointer that is not aligned to the KV element.
  std::vector<uint8_t*> misaligned(blocks.begin(), blocks.end());
  misaligned[0] += 1;
  Batch unaligned;
  unaligned.sequences.push_back(SequenceInput{good, 0, misaligned, true});
  EXPECT_EQ(backend->Forward(unaligned, logits).code(), absl::StatusCode::kInvalidArgument);

  // Logits too small.
  Batch one;
  one.sequences.push_back(SequenceInput{good, 0, blocks, true});
  EXPECT_EQ(backend->Forward(one, std::span<float>(logits.data(), 3)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuBlasBackendTest, CreateChecksOptionsAndLayout) {
  auto m = MakeModel(DType::kF32, false, testing::RandomModelOptions::DefaultConfig());
  ASSERT_NE(m, nullptr);
  KvLayout layout = KvLayout::ForModel(m->config(), 4, DType::kF32);
  CpuBlasOptions options;
  options.threads = -1;
  EXPECT_EQ(CpuBlasBackend::Create(*m, layout, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  KvLayout bad = layout;
  bad.kv_dim += 1;
  EXPECT_EQ(CpuBlasBackend::Create(*m, bad, CpuBlasOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (Isa isa : cpu_blas::kAllIsas) {
    if (cpu_blas::IsaSupported(isa)) continue;
    CpuBlasOptions forced;
    forced.isa = isa;
    EXPECT_EQ(CpuBlasBackend::Create(*m, layout, forced).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  auto by_name = CreateBackend("cpu_blas", *m, layout, BackendOptions{2});
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ((*by_name)->name(), "cpu_blas");
}

// stories260K (a real model, GQA): logits match and greedy continuations of 24 prompts
// over 64 tokens are identical to the reference's. The prompts run as one batch on
// cpu_blas (mixed prefill lengths, then batched decode) and one by one on the reference.
TEST(CpuBlasBackendTest, Stories260KGreedyMatchesReference) {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  ASSERT_NE(dir, nullptr) << "KVSERVE_MODELS_DIR is not set";
  auto loaded = model::Model::Load(std::string(dir) + "/stories260K.gguf");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const model::Model& m = **loaded;
  auto tokenizer = model::Tokenizer::Create(m.vocab());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const int vocab = m.config().vocab_size;
  const KvLayout layout = KvLayout::ForModel(m.config(), 16, DType::kF32);

  const std::vector<std::string> prompts = {"Once upon a time",
                                            "The little dog",
                                            "Lily wanted to",
                                            "One day, a big",
                                            "Tom and Sue",
                                            "The sun was",
                                            "There was a girl named",
                                            "Mom said",
                                            "The cat sat on",
                                            "In the park",
                                            "A bird flew",
                                            "Ben had a red",
                                            "The old man",
                                            "She looked at the",
                                            "It was a rainy day",
                                            "The boy ran",
                                            "They played with",
                                            "At night, the",
                                            "The tree was very",
                                            "He found a",
                                            "The fish swam",
                                            "Once there was a little car",
                                            "Sam liked to",
                                            "The flower"};
  constexpr int kNewTokens = 64;

  CpuBlasOptions options;
  options.threads = 2;
  Driver fast(MakeCpuBlas(m, layout, options), m);
  Driver ref(MakeReference(m, layout), m);
  const int n = static_cast<int>(prompts.size());
  std::vector<std::vector<int32_t>> fast_out(n), ref_out(n);
  std::vector<Driver::Step> steps;
  for (int i = 0; i < n; ++i) {
    fast.AddSequence();
    ref.AddSequence();
    steps.push_back({i, (*tokenizer)->Encode(prompts[i], /*add_bos=*/true)});
  }
  float worst = 0.0f;
  for (int t = 0; t < kNewTokens; ++t) {
    const std::vector<float> lf = fast.Run(steps);
    for (int i = 0; i < n; ++i) {
      const std::vector<float> lr = ref.Run({steps[i]});
      const std::span<const float> rf(lf.data() + static_cast<size_t>(i) * vocab, vocab);
      worst = std::max(worst, RelativeDiff(rf, lr));
      fast_out[i].push_back(static_cast<int32_t>(kernels::ArgMax(rf)));
      ref_out[i].push_back(static_cast<int32_t>(kernels::ArgMax(lr)));
      steps[i].tokens = {fast_out[i].back()};
    }
  }
  EXPECT_LE(worst, kLogitTolerance);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(fast_out[i], ref_out[i])
        << "prompt \"" << prompts[i] << "\": cpu_blas wrote \"" << (*tokenizer)->Decode(fast_out[i])
        << "\", reference \"" << (*tokenizer)->Decode(ref_out[i]) << "\"";
  }
  // The canonical continuation (llama2.c's output, see DESIGN.md) starts like this.
  EXPECT_THAT((*tokenizer)->Decode(fast_out[0]), HasSubstr("there was a little girl named Lily"));
}

}  // namespace
}  // namespace kvserve::backends
