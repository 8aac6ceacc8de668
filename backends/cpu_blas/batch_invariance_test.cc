// Cache-state invariance, bit for bit: a sequence's K/V rows and logits are the same
// whichever way its tokens reach the backend (one decode step per token, one prefill
// chunk, chunks of any size beside other sequences' prefills and decodes). That is what
// makes a conversation's output independent of where its history's K/V came from (this
// replica's cache, kvserve-cache, or recomputed). Checked on the reference backend and
// on cpu_blas at every kernel level this CPU has, for every weight type, with
// GemmOptions::batch_invariant on (the default); and shown to be needed: with it off,
// cpu_blas's sgemm paths round differently (BatchInvarianceOffTest).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu_blas/cpu_blas_backend.h"
#include "backends/kv_arena.h"
#include "backends/reference/reference_backend.h"
#include "backends/testing/random_model.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace kvserve::backends {
namespace {

using cpu_blas::Isa;
using model::DType;
using model::KvLayout;

// Rows that are whole q4_K / q6_K super-blocks (256 columns), as the interleaved and
// panel kernels of every quantized type want; 16-row multiples for the panels, and a
// vocabulary that is not one (a panel tail).
model::ModelConfig Config() {
  model::ModelConfig c = testing::RandomModelOptions::DefaultConfig();
  c.dim = 256;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.rope_dim = 64;
  c.ffn_dim = 512;
  c.vocab_size = 300;
  c.context_length = 256;
  return c;
}

// Rows of 96 and 160 columns: not whole 256-element super-blocks, so q8_0 and q4_0 take
// the kernels for plain rows (not the interleaved ones) at every row count.
model::ModelConfig NarrowConfig() {
  model::ModelConfig c = Config();
  c.dim = 96;
  c.head_dim = 24;
  c.rope_dim = 24;
  c.ffn_dim = 160;
  return c;
}

// One way of feeding tokens: the backend, the sequences' blocks, and what they hold.
class Feeder {
 public:
  Feeder(std::unique_ptr<Backend> backend, const model::Model& m)
      : backend_(std::move(backend)), arena_(backend_->kv_layout()), vocab_(m.config().vocab_size) {
    for (int s = 0; s < 3; ++s) {
      const std::span<uint8_t* const> b = arena_.Allocate(m.config().context_length);
      blocks_.emplace_back(b.begin(), b.end());
      cached_.push_back(0);
    }
  }

  struct Chunk {
    int seq;
    std::vector<int32_t> tokens;
  };
  // One Forward over `chunks` (logits for every chunk); returns the logits of chunk 0.
  std::vector<float> Step(const std::vector<Chunk>& chunks) {
    Batch batch;
    for (const Chunk& c : chunks) {
      batch.sequences.push_back(SequenceInput{c.tokens, cached_[c.seq], blocks_[c.seq], true});
    }
    std::vector<float> logits(chunks.size() * static_cast<size_t>(vocab_));
    const absl::Status status = backend_->Forward(batch, logits);
    EXPECT_TRUE(status.ok()) << status;
    for (const Chunk& c : chunks) cached_[c.seq] += static_cast<int>(c.tokens.size());
    return std::vector<float>(logits.begin(), logits.begin() + vocab_);
  }

  // The bytes of sequence 0's blocks that hold positions [0, n).
  std::vector<uint8_t> Kv(int n) const {
    const KvLayout& layout = backend_->kv_layout();
    std::vector<uint8_t> out;
    for (int b = 0; b * layout.block_tokens < n; ++b) {
      out.insert(out.end(), blocks_[0][b], blocks_[0][b] + layout.block_bytes());
    }
    return out;
  }

 private:
  std::unique_ptr<Backend> backend_;
  KvArena arena_;  // zero-filled blocks: positions never written compare equal
  int vocab_;
  std::vector<std::vector<uint8_t*>> blocks_;
  std::vector<int> cached_;
};

std::vector<int32_t> Tokens(int n, int vocab, int salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + salt * 11 + 5) % vocab;
  return t;
}

std::vector<int32_t> Slice(const std::vector<int32_t>& v, int begin, int end) {
  return std::vector<int32_t>(v.begin() + begin, v.begin() + end);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// First index where a and b differ, for the failure message.
template <typename T>
size_t FirstDifference(const std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  }
  return std::min(a.size(), b.size());
}

constexpr int kHistory = 75;  // > 64 rows: every sgemm crossover of GemmOptions, 3 blocks of 32
constexpr int kDecode = 4;    // greedy steps after the history

// What one way of feeding the history gives: the logits after the history and after each
// of kDecode steps that follow (fed the same tokens), and the K/V of every position.
struct Outcome {
  std::vector<std::vector<float>> logits;
  std::vector<uint8_t> kv;
};

// Feeds `history` with `feed` (which leaves the logits of its last token), then the same
// kDecode tokens one step at a time; `beside` adds other sequences to those steps.
template <typename Feed>
Outcome Run(Feeder& f, const std::vector<int32_t>& history, int vocab, bool beside,
            const Feed& feed) {
  Outcome out;
  out.logits.push_back(feed(f));
  for (int step = 0; step < kDecode; ++step) {
    std::vector<Feeder::Chunk> chunks = {{0, {(step * 13 + 7) % vocab}}};
    if (beside) {
      chunks.push_back({1, Tokens(step == 0 ? 40 : 1, vocab, 20 + step)});
      chunks.push_back({2, {(step * 5 + 3) % vocab}});
    }
    out.logits.push_back(f.Step(chunks));
  }
  out.kv = f.Kv(static_cast<int>(history.size()) + kDecode);
  return out;
}

using Factory = std::function<std::unique_ptr<Backend>(const model::Model&, const KvLayout&)>;

// The history fed as one decode step per token, as one chunk, and as uneven chunks in
// steps shared with other sequences' prefills and decodes; every outcome equal to the
// first bit for bit. Returns the number of outcomes that differ (each reported).
int CountDifferences(const model::Model& m, const KvLayout& layout, const Factory& make,
                     bool report) {
  const int vocab = m.config().vocab_size;
  const std::vector<int32_t> history = Tokens(kHistory, vocab, 1);
  std::vector<std::pair<std::string, Outcome>> outcomes;
  {
    Feeder f(make(m, layout), m);
    outcomes.emplace_back("one token per step", Run(f, history, vocab, false, [&](Feeder& f) {
                            std::vector<float> l;
                            for (int t = 0; t < kHistory; ++t) l = f.Step({{0, {history[t]}}});
                            return l;
                          }));
  }
  {
    Feeder f(make(m, layout), m);
    outcomes.emplace_back("one chunk", Run(f, history, vocab, false, [&](Feeder& f) {
                            return f.Step({{0, history}});
                          }));
  }
  {
    Feeder f(make(m, layout), m);
    outcomes.emplace_back(
        "uneven chunks in shared steps", Run(f, history, vocab, true, [&](Feeder& f) {
          const int cuts[] = {0, 1, 10, 43, 45, kHistory};
          std::vector<float> l;
          for (int i = 0; i + 1 < 6; ++i) {
            std::vector<Feeder::Chunk> chunks = {{0, Slice(history, cuts[i], cuts[i + 1])}};
            chunks.push_back({1, Tokens(i % 2 == 0 ? 33 : 1, vocab, 10 + i)});
            chunks.push_back({2, Tokens(i == 0 ? 5 : 1, vocab, 30 + i)});
            l = f.Step(chunks);
          }
          return l;
        }));
  }
  int differ = 0;
  const Outcome& first = outcomes[0].second;
  for (size_t o = 1; o < outcomes.size(); ++o) {
    const auto& [name, got] = outcomes[o];
    bool same = got.kv == first.kv;
    if (!same && report) {
      ADD_FAILURE() << name << ": K/V differs from " << outcomes[0].first << " at byte "
                    << FirstDifference(got.kv, first.kv);
    }
    for (size_t s = 0; s < got.logits.size(); ++s) {
      if (SameBits(got.logits[s], first.logits[s])) continue;
      same = false;
      if (report) {
        const size_t at = FirstDifference(got.logits[s], first.logits[s]);
        ADD_FAILURE() << name << ": logits after step " << s << " differ from " << outcomes[0].first
                      << " at " << at << ": " << got.logits[s][at] << " vs " << first.logits[s][at];
      }
    }
    differ += same ? 0 : 1;
  }
  return differ;
}

std::unique_ptr<model::Model> MakeModel(DType dtype, bool narrow = false) {
  testing::RandomModelOptions options;
  options.config = narrow ? NarrowConfig() : Config();
  options.dtype = dtype;
  options.seed = 5;
  auto m = testing::MakeRandomModel(options);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                                  DType::kQ4_0, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                                  DType::kQ5_K, DType::kQ6_K};

// Every kernel level this CPU has, with and without the panel layouts.
void CheckEveryLevel(const model::Model& model) {
  const model::Model* m = &model;
  for (Isa isa : cpu_blas::kAllIsas) {
    if (!cpu_blas::IsaSupported(isa)) {
      std::printf("[  NOTE    ] %s not on this CPU: not checked\n",
                  std::string(cpu_blas::IsaName(isa)).c_str());
      continue;
    }
    // Panels or rows (the quantized kernels differ; the float ones too from avx512), with
    // f16 and f32 K/V in turn; two threads, so products and attention go in slices.
    // bf16 panels at avx512bf16 with each of their two kernels (bf16_products.h), and with
    // bf16_dot off (matmul_bf16_panels_exact, as below avx512bf16).
    for (int pass = 0; pass < 4; ++pass) {
      const bool panels = pass != 1;
      const bool fma = pass == 2;
      const bool exact = pass == 3;
      if ((fma || exact) &&
          (isa != Isa::kAvx512Bf16 || model.weights().layers[0].wq.type != DType::kBF16)) {
        continue;
      }
      const DType kv = panels ? DType::kF16 : DType::kF32;
      SCOPED_TRACE(::testing::Message() << cpu_blas::IsaName(isa) << (panels ? " panels" : " rows")
                                        << (fma ? " fma" : "") << (exact ? " bf16_dot off" : "")
                                        << " kv " << model::DTypeName(kv));
      CpuBlasOptions options;
      options.isa = isa;
      options.threads = 2;
      options.gemm.f32_panels = options.gemm.bf16_panels = options.gemm.quant_panels = panels;
      options.gemm.bf16_dot = !exact;
      options.gemm.bf16_panel_kernel =
          fma ? cpu_blas::Bf16PanelKernel::kFma : cpu_blas::Bf16PanelKernel::kDpbf16;
      ASSERT_TRUE(options.gemm.batch_invariant);  // the default
      const KvLayout layout = KvLayout::ForModel(m->config(), 16, kv);
      CountDifferences(
          *m, layout,
          [&](const model::Model& mm, const KvLayout& l) {
            auto b = CpuBlasBackend::Create(mm, l, options);
            EXPECT_TRUE(b.ok()) << b.status();
            return std::unique_ptr<Backend>(std::move(*b));
          },
          /*report=*/true);
    }
  }
}

class BatchInvarianceTest : public ::testing::TestWithParam<DType> {};

TEST_P(BatchInvarianceTest, ReferenceBackend) {
  auto m = MakeModel(GetParam());
  ASSERT_NE(m, nullptr);
  for (DType kv : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(std::string("kv ") + std::string(model::DTypeName(kv)));
    const KvLayout layout = KvLayout::ForModel(m->config(), 16, kv);
    CountDifferences(
        *m, layout,
        [](const model::Model& mm, const KvLayout& l) {
          auto b = ReferenceBackend::Create(mm, l);
          EXPECT_TRUE(b.ok()) << b.status();
          return std::unique_ptr<Backend>(std::move(*b));
        },
        /*report=*/true);
  }
}

// Every kernel level, with and without the panel layouts; q8_0 and q4_0 also with rows
// that are not whole super-blocks.
TEST_P(BatchInvarianceTest, CpuBlasEveryLevel) {
  const bool narrow_too = GetParam() == DType::kQ8_0 || GetParam() == DType::kQ4_0;
  for (bool narrow : {false, true}) {
    if (narrow && !narrow_too) continue;
    SCOPED_TRACE(narrow ? "narrow rows" : "whole super-blocks");
    auto m = MakeModel(GetParam(), narrow);
    ASSERT_NE(m, nullptr);
    CheckEveryLevel(*m);
  }
}

// Local attention (a window of 64 positions) with f32 weights: a prefill range's rows then
// see different first positions, and the spans over which the paged attention widens f16
// K/V (attention.cc) start inside a block: the 75-token chunk's last range (rows 64-74)
// sees [1, 16) alone, [16, 64) as one span of three blocks, then its diagonal; one token
// per step (no widening) must give the same bits.
TEST(BatchInvarianceWindowTest, CpuBlasEveryLevel) {
  testing::RandomModelOptions options;
  options.config = Config();
  options.config.sliding_window = 64;
  options.dtype = DType::kF32;
  options.seed = 5;
  auto m = testing::MakeRandomModel(options);
  ASSERT_TRUE(m.ok()) << m.status();
  CheckEveryLevel(**m);
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, BatchInvarianceTest, ::testing::ValuesIn(kWeightTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(model::DTypeName(info.param));
                         });

// A mixture of experts (8 experts of 256 hidden units, 2 per token) in `dtype`.
testing::RandomModelOptions MoeOptions(DType dtype) {
  testing::RandomModelOptions options;
  options.config = Config();
  options.config.architecture = "qwen3moe";
  options.config.rope_style = model::RopeStyle::kRotateHalves;
  options.config.qk_norm = true;
  options.config.n_experts = 8;
  options.config.n_experts_used = 2;
  options.config.ffn_dim = 256;
  options.dtype = dtype;
  options.seed = 5;
  return options;
}

// The same with a mixture of experts, where a row's experts are run on the rows of the
// whole step that chose them.
TEST_P(BatchInvarianceTest, CpuBlasMixtureOfExperts) {
  auto m = testing::MakeRandomModel(MoeOptions(GetParam()));
  ASSERT_TRUE(m.ok()) << m.status();
  CheckEveryLevel(**m);
}

// And with deepseek2's: a dense first layer, shared experts run on every row of the
// step, sigmoid gating with the selection bias, expert groups, scaled weights.
TEST_P(BatchInvarianceTest, CpuBlasDeepseekMixtureOfExperts) {
  testing::RandomModelOptions options = MoeOptions(GetParam());
  options.config = testing::WithDeepseekV3Routing(options.config, /*dense_ffn=*/256);
  auto m = testing::MakeRandomModel(options);
  ASSERT_TRUE(m.ok()) << m.status();
  CheckEveryLevel(**m);
}

// The tests above can fail: with the option off, prefill chunks take OpenBLAS sgemm
// (projections of 32 or more rows at the row-major float levels; attention of 4 or more
// rows everywhere), which sums in another order than the decode kernels.
TEST(BatchInvarianceOffTest, SgemmPathsDiffer) {
  auto m = MakeModel(DType::kF32);
  ASSERT_NE(m, nullptr);
  CpuBlasOptions options;
  options.threads = 1;
  options.gemm.batch_invariant = false;
  const KvLayout layout = KvLayout::ForModel(m->config(), 16, DType::kF32);
  EXPECT_GT(CountDifferences(
                *m, layout,
                [&](const model::Model& mm, const KvLayout& l) {
                  auto b = CpuBlasBackend::Create(mm, l, options);
                  EXPECT_TRUE(b.ok()) << b.status();
                  return std::unique_ptr<Backend>(std::move(*b));
                },
                /*report=*/false),
            0);
}

}  // namespace
}  // namespace kvserve::backends
