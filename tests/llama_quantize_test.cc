// Files written by llama.cpp's llama-quantize (Q4_K_M: q4_K with q6_K for the output and
// some attn_v / ffn_down; Q5_K_M: the same with q5_K for q4_K) load in kvserve, hold the
// bytes `kvserve-bench mkmodel`'s quantizer writes for the same floats, and run on cpu_blas
// as on the reference backend; its Q8_0, Q4_0 and Q4_K_M files of a mixture of experts
// (qwen3moe, with Q4_K_M's q5_K attn_output) load and run too, and so do its Q4_K_M and
// Q5_K_M files of a deepseek2 model whose rows of 128 and 160 elements take the q5_0 /
// q5_1 (and q8_0) fallbacks.
//
// Needs the llama-quantize binary: its path comes from the environment variable
// KVSERVE_LLAMA_QUANTIZE (CMake sets it from the cache variable of the same name,
// default /tmp/llama.cpp/build/bin/llama-quantize). Without it the test is skipped,
// saying why.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu_blas/cpu_blas_backend.h"
#include "backends/kv_arena.h"
#include "backends/reference/reference_backend.h"
#include "bench/synthetic_model.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/quant.h"

namespace kvserve {
namespace {

using model::DType;

class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("llama_quantize_test_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A small llama whose rows are whole 256-element super-blocks; 8 layers so that
// use_more_bits picks some (0, 3, 6, 7) and not others.
bench::SyntheticModelOptions SmallModel() {
  bench::SyntheticModelOptions o;
  o.config = *bench::PresetConfig("tiny");
  o.config.dim = 256;
  o.config.n_layers = 8;
  o.config.n_heads = 4;
  o.config.n_kv_heads = 2;
  o.config.head_dim = 64;
  o.config.rope_dim = 64;
  o.config.ffn_dim = 512;
  o.config.vocab_size = 512;
  o.seed = 7;
  return o;
}

// SmallModel() as a deepseek2 model of 3 layers: latent attention (r 256, no query
// compression, one KV head, rope 32, v_head 64: attn_output's rows 4 heads x 64) with
// attn_k_b's rows of `qk_nope`, layer 0 dense of FFN 512, then `experts` experts of
// `expert_ffn`, `used` per token, 2 shared, softmax gating, unnormalized weights.
bench::SyntheticModelOptions SmallDeepseek2(int qk_nope, int expert_ffn, int experts, int used) {
  bench::SyntheticModelOptions o = SmallModel();
  model::ModelConfig& c = o.config;
  c.architecture = "deepseek2";
  c.n_layers = 3;
  c.n_kv_heads = 1;
  c.kv_lora_rank = 256;
  c.q_lora_rank = 0;
  c.head_dim = qk_nope + 32;
  c.rope_dim = 32;
  c.v_head_dim = 64;
  c.n_dense_layers = 1;
  c.dense_ffn_dim = 512;
  c.ffn_dim = expert_ffn;
  c.n_experts = experts;
  c.n_experts_used = used;
  c.n_shared_experts = 2;
  c.expert_weights_norm = false;
  return o;
}

// cpu_blas options whose products run on float activations (weights decoded to f32 for
// sgemm, as the reference multiplies them), for comparing mixtures of experts: where two
// experts' router logits nearly tie, 8-bit activations may select the other expert.
backends::CpuBlasOptions FloatProducts() {
  backends::CpuBlasOptions o;
  o.gemm.batch_invariant = false;
  o.gemm.sgemm_min_rows = o.gemm.quant_sgemm_min_rows = 1;
  o.gemm.quant_interleave_min_rows = 1 << 20;
  o.gemm.f32_panels = o.gemm.bf16_panels = false;
  o.gemm.quant_panels = false;
  return o;
}

// Logits of a 12-token prompt then 4 decode steps, one row per step.
std::vector<float> RunSteps(backends::Backend& backend, const model::Model& m) {
  const model::KvLayout layout = backend.kv_layout();
  backends::KvArena arena(layout);
  const std::span<uint8_t* const> blocks = arena.Allocate(64);
  const int vocab = m.config().vocab_size;
  std::vector<float> all;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 12; ++i) prompt.push_back((i * 37 + 5) % vocab);
  int32_t cached = 0;
  std::vector<std::vector<int32_t>> steps = {prompt};
  for (int i = 0; i < 4; ++i) steps.push_back({(i * 11 + 3) % vocab});
  for (const std::vector<int32_t>& tokens : steps) {
    backends::Batch batch;
    batch.sequences.push_back(backends::SequenceInput{tokens, cached, blocks, true});
    std::vector<float> logits(static_cast<size_t>(vocab));
    EXPECT_TRUE(backend.Forward(batch, logits).ok());
    cached += static_cast<int32_t>(tokens.size());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// The llama-quantize binary named by KVSERVE_LLAMA_QUANTIZE, or nullptr when it is not
// there.
const char* QuantizeTool() {
  const char* tool = std::getenv("KVSERVE_LLAMA_QUANTIZE");
  return tool != nullptr && ::access(tool, X_OK) == 0 ? tool : nullptr;
}
constexpr char kNoTool[] =
    "llama-quantize not found (set KVSERVE_LLAMA_QUANTIZE, or the CMake cache variable of "
    "that name, to its path; see docs/performance.md)";

// Runs `tool` IN OUT TYPE on one thread; the log goes beside OUT.
int Quantize(const char* tool, const std::string& in, const std::string& out,
             const std::string& type) {
  const std::string cmd =
      std::string(tool) + " " + in + " " + out + " " + type + " 1 > " + out + ".log 2>&1";
  return std::system(cmd.c_str());
}

// cpu_blas with `options` (default: quantized activations, best kernel level; 2 threads)
// against the reference oracle on `m`: the largest logit difference over RunSteps relative
// to max(1, max |logit|).
float CpuBlasVsReference(const model::Model& m, backends::CpuBlasOptions options = {}) {
  const model::KvLayout layout = model::KvLayout::ForModel(m.config(), 16, DType::kF32);
  options.threads = 2;
  auto fast = backends::CpuBlasBackend::Create(m, layout, options);
  EXPECT_TRUE(fast.ok()) << fast.status();
  auto ref = backends::ReferenceBackend::Create(m, layout);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!fast.ok() || !ref.ok()) return INFINITY;
  const std::vector<float> a = RunSteps(**fast, m);
  const std::vector<float> b = RunSteps(**ref, m);
  EXPECT_EQ(a.size(), b.size());
  float max_abs = 1.0f;
  float max_diff = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    max_abs = std::max(max_abs, std::fabs(b[i]));
    max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
  }
  return max_diff / max_abs;
}

// The fraction of equal bytes in two tensors of the same type and shape.
double SameFraction(const model::TensorView& a, const model::TensorView& b) {
  const size_t n = static_cast<size_t>(a.rows) * a.row_bytes();
  if (a.type != b.type || n != static_cast<size_t>(b.rows) * b.row_bytes()) {
    ADD_FAILURE() << "different types or sizes";
    return 0.0;
  }
  const auto* pa = static_cast<const uint8_t*>(a.data);
  const auto* pb = static_cast<const uint8_t*>(b.data);
  size_t same = 0;
  for (size_t i = 0; i < n; ++i) same += pa[i] == pb[i];
  return static_cast<double>(same) / static_cast<double>(n);
}

// llama-quantize's `type` file of SmallModel()'s f32 weights (theirs) and the file
// WriteSyntheticModel writes from the same floats with `ours` (its dtype or mix), both
// loaded (both null, with a test failure, when a step fails).
struct QuantizedPair {
  std::unique_ptr<TempDir> dir;  // the files, kept while the models live
  std::unique_ptr<model::Model> theirs;
  std::unique_ptr<model::Model> mine;
};
QuantizedPair QuantizeBoth(const char* tool, const std::string& type,
                           const bench::SyntheticModelOptions& ours) {
  QuantizedPair out;
  out.dir = std::make_unique<TempDir>();
  const TempDir& dir = *out.dir;
  bench::SyntheticModelOptions f32 = ours;
  f32.dtype = DType::kF32;
  f32.mix = bench::QuantMix::kUniform;
  EXPECT_TRUE(bench::WriteSyntheticModel(f32, dir.File("f32.gguf")).ok());
  EXPECT_TRUE(bench::WriteSyntheticModel(ours, dir.File("ours.gguf")).ok());
  EXPECT_EQ(Quantize(tool, dir.File("f32.gguf"), dir.File("llama.gguf"), type), 0);
  absl::StatusOr<std::unique_ptr<model::Model>> theirs = model::Model::Load(dir.File("llama.gguf"));
  absl::StatusOr<std::unique_ptr<model::Model>> mine = model::Model::Load(dir.File("ours.gguf"));
  if (!theirs.ok() || !mine.ok()) {
    ADD_FAILURE() << "load: " << theirs.status() << " / " << mine.status();
    return out;
  }
  out.theirs = std::move(*theirs);
  out.mine = std::move(*mine);
  return out;
}

// cpu_blas against the reference oracle on llama.cpp's `type` file `m` (see
// kQuantLogitTolerance in cpu_blas_backend_test.cc): within 5e-2 of the logit scale
// (activation blocks of 256 on a small random model), printed.
void ExpectCpuBlasNearReference(const model::Model& m, const char* type) {
  const float diff = CpuBlasVsReference(m);
  EXPECT_LE(diff, 5e-2f);
  std::printf("[  NOTE    ] cpu_blas vs reference on llama-quantize's %s: %.2e\n", type, diff);
}

TEST(LlamaQuantizeTest, Q4_K_MFileLoadsMatchesOurQuantizerAndRunsOnCpuBlas) {
  const char* tool = QuantizeTool();
  if (tool == nullptr) GTEST_SKIP() << kNoTool;
  bench::SyntheticModelOptions ours = SmallModel();
  ours.mix = bench::QuantMix::kQ4_K_M;
  const QuantizedPair both = QuantizeBoth(tool, "Q4_K_M", ours);
  ASSERT_NE(both.theirs, nullptr);

  // The mix: q6_K output and attn_v / ffn_down in layers 0, 3, 6, 7; q4_K elsewhere.
  const model::ModelWeights& w = both.theirs->weights();
  EXPECT_EQ(w.output.type, DType::kQ6_K);
  EXPECT_EQ(w.token_embedding.type, DType::kQ4_K);
  for (int l = 0; l < 8; ++l) {
    const bool more = l == 0 || l == 3 || l == 6 || l == 7;
    EXPECT_EQ(w.layers[l].wv.type, more ? DType::kQ6_K : DType::kQ4_K) << l;
    EXPECT_EQ(w.layers[l].w_down.type, more ? DType::kQ6_K : DType::kQ4_K) << l;
    EXPECT_EQ(w.layers[l].wq.type, DType::kQ4_K) << l;
  }

  // Same floats, same reference quantizer: the bytes agree except where float rounding
  // in the least-squares fits picks a neighbouring code (measured: under 0.01 %).
  const model::ModelWeights& o = both.mine->weights();
  EXPECT_GT(SameFraction(w.output, o.output), 0.999);
  EXPECT_GT(SameFraction(w.token_embedding, o.token_embedding), 0.999);
  for (int l = 0; l < 8; ++l) {
    EXPECT_GT(SameFraction(w.layers[l].wv, o.layers[l].wv), 0.999) << l;
    EXPECT_GT(SameFraction(w.layers[l].w_down, o.layers[l].w_down), 0.999) << l;
    EXPECT_GT(SameFraction(w.layers[l].w_up, o.layers[l].w_up), 0.999) << l;
  }

  // Measured 1.9e-2.
  ExpectCpuBlasNearReference(*both.theirs, "Q4_K_M");
}

// llama-quantize's Q5_K_M: q5_K where Q4_K_M has q4_K (q6_K for the output and the same
// attn_v / ffn_down). Its q5_K tensors hold the bytes of kvserve's q5_K quantizer for the
// same floats (model::EncodeRow, llama.cpp's quantize_row_q5_K_ref re-derived), and
// cpu_blas agrees with the reference on the file.
TEST(LlamaQuantizeTest, Q5_K_MFileLoadsMatchesOurQuantizerAndRunsOnCpuBlas) {
  const char* tool = QuantizeTool();
  if (tool == nullptr) GTEST_SKIP() << kNoTool;
  bench::SyntheticModelOptions ours = SmallModel();
  ours.dtype = DType::kQ5_K;
  const QuantizedPair both = QuantizeBoth(tool, "Q5_K_M", ours);
  ASSERT_NE(both.theirs, nullptr);

  const model::ModelWeights& w = both.theirs->weights();
  const model::ModelWeights& o = both.mine->weights();
  EXPECT_EQ(w.output.type, DType::kQ6_K);
  EXPECT_EQ(w.token_embedding.type, DType::kQ5_K);
  EXPECT_GT(SameFraction(w.token_embedding, o.token_embedding), 0.999);
  for (int l = 0; l < 8; ++l) {
    const bool more = l == 0 || l == 3 || l == 6 || l == 7;
    EXPECT_EQ(w.layers[l].wv.type, more ? DType::kQ6_K : DType::kQ5_K) << l;
    EXPECT_EQ(w.layers[l].w_down.type, more ? DType::kQ6_K : DType::kQ5_K) << l;
    for (auto m : {&model::LayerWeights::wq, &model::LayerWeights::wo, &model::LayerWeights::w_up,
                   &model::LayerWeights::w_gate}) {
      EXPECT_EQ((w.layers[l].*m).type, DType::kQ5_K) << l;
      EXPECT_GT(SameFraction(w.layers[l].*m, o.layers[l].*m), 0.999) << l;
    }
  }

  // Measured 1.7e-2.
  ExpectCpuBlasNearReference(*both.theirs, "Q5_K_M");
}

// llama-quantize's Q8_0, Q4_0 and Q4_K_M files of a mixture of experts (a kvserve-bench
// mkmodel qwen3moe f32 file: 8 experts of FFN 512, 2 per token, rows of whole 256-element
// super-blocks) load with every expert in the type llama-quantize chose for its 3-D tensor
// (Q4_K_M: q4_K gate and up; down q4_K or q6_K by layer; attn_output q5_K, as for every
// 8-expert model), and cpu_blas agrees with the reference on them.
TEST(LlamaQuantizeTest, MixtureOfExpertsFilesLoadAndRunOnCpuBlas) {
  // 8: for a model of exactly 8 experts (Mixtral's count) llama-quantize's Q4_K_M writes
  // attn_output in q5_K.
  constexpr int kExperts = 8;
  const char* tool = QuantizeTool();
  if (tool == nullptr) GTEST_SKIP() << kNoTool;
  TempDir dir;
  bench::SyntheticModelOptions f32 = SmallModel();
  f32.config.n_layers = 3;
  f32.config.n_experts = kExperts;
  f32.config.n_experts_used = 2;
  ASSERT_TRUE(bench::ApplyArchitecture("qwen3moe", f32.config).ok());
  ASSERT_TRUE(bench::WriteSyntheticModel(f32, dir.File("f32.gguf")).ok());
  struct Case {
    std::string type;
    std::vector<DType> gate_up;  // the types allowed for ffn_gate_exps and ffn_up_exps
    std::vector<DType> down;     // and for ffn_down_exps
    DType attn_output;
  };
  const Case cases[] = {{"Q8_0", {DType::kQ8_0}, {DType::kQ8_0}, DType::kQ8_0},
                        {"Q4_0", {DType::kQ4_0}, {DType::kQ4_0}, DType::kQ4_0},
                        {"Q4_K_M", {DType::kQ4_K}, {DType::kQ4_K, DType::kQ6_K}, DType::kQ5_K}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.type);
    const std::string file = dir.File(c.type + ".gguf");
    ASSERT_EQ(Quantize(tool, dir.File("f32.gguf"), file, c.type), 0);
    absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(file);
    ASSERT_TRUE(m.ok()) << m.status();
    const model::ModelConfig& config = (*m)->config();
    ASSERT_EQ(config.n_experts, kExperts);
    ASSERT_EQ(config.n_experts_used, 2);
    auto allowed = [](const std::vector<DType>& types, DType t) {
      return std::find(types.begin(), types.end(), t) != types.end();
    };
    for (int l = 0; l < config.n_layers; ++l) {
      const model::LayerWeights& L = (*m)->weights().layers[static_cast<size_t>(l)];
      EXPECT_EQ(L.wo.type, c.attn_output) << l;
      ASSERT_EQ(L.expert_down.size(), static_cast<size_t>(config.n_experts)) << l;
      for (int e = 0; e < config.n_experts; ++e) {
        const size_t i = static_cast<size_t>(e);
        EXPECT_TRUE(allowed(c.gate_up, L.expert_gate[i].type)) << l << " " << e;
        EXPECT_EQ(L.expert_up[i].type, L.expert_gate[i].type) << l << " " << e;
        EXPECT_TRUE(allowed(c.down, L.expert_down[i].type)) << l << " " << e;
        EXPECT_EQ(L.expert_down[i].type, L.expert_down[0].type) << l << " " << e;
      }
    }
    // Routing is a discrete choice: where two experts' router logits nearly tie, the
    // rounding of cpu_blas's 8-bit activations elsewhere in the layer can select the other
    // expert, and the logits then differ by much more than the rounding (measured 0.14 on
    // Q8_0 at one step). So the products run on float activations here (weights decoded
    // to f32 for sgemm, as the reference multiplies them) and must agree to f32 rounding;
    // the default kernels, at the same weights, are compared with the reference in
    // cpu_blas_backend_test (MixtureOfExpertsEveryTypeAndLevelMatchesReference) and must
    // here give finite logits.
    EXPECT_LE(CpuBlasVsReference(**m, FloatProducts()), 1e-3f);
    const float diff = CpuBlasVsReference(**m);
    EXPECT_TRUE(std::isfinite(diff));
    std::printf(
        "[  NOTE    ] cpu_blas (8-bit activations) vs reference on llama-quantize's "
        "qwen3moe %s: %.2e\n",
        c.type.c_str(), diff);
  }
}

// llama-quantize's Q8_0, Q4_0 and Q4_K_M files of a deepseek2 mixture of experts (from
// an f32 file with latent attention, layer 0 dense, then 16 experts of 256, 2 per token,
// 2 shared; rows of whole 256-element super-blocks) load, and cpu_blas agrees with the
// reference on them as in MixtureOfExpertsFilesLoadAndRunOnCpuBlas.
TEST(LlamaQuantizeTest, Deepseek2MixtureOfExpertsFilesLoadAndRun) {
  const char* tool = QuantizeTool();
  if (tool == nullptr) GTEST_SKIP() << kNoTool;
  TempDir dir;
  const bench::SyntheticModelOptions f32 = SmallDeepseek2(/*qk_nope=*/256, /*expert_ffn=*/256,
                                                          /*experts=*/16, /*used=*/2);
  ASSERT_TRUE(bench::WriteSyntheticModel(f32, dir.File("f32.gguf")).ok());
  for (const char* type : {"Q8_0", "Q4_0", "Q4_K_M"}) {
    SCOPED_TRACE(type);
    const std::string file = dir.File(std::string(type) + ".gguf");
    ASSERT_EQ(Quantize(tool, dir.File("f32.gguf"), file, type), 0);
    absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(file);
    ASSERT_TRUE(m.ok()) << m.status();
    const model::ModelConfig& config = (*m)->config();
    ASSERT_EQ(config.n_experts, 16);
    ASSERT_EQ(config.n_shared_experts, 2);
    ASSERT_EQ(config.n_dense_layers, 1);
    const model::LayerWeights& L = (*m)->weights().layers[2];
    EXPECT_NE(L.expert_gate[0].type, DType::kF32);
    EXPECT_NE(L.shared_gate.type, DType::kF32);
    // Float products, as in MixtureOfExpertsFilesLoadAndRunOnCpuBlas (routing near-ties).
    EXPECT_LE(CpuBlasVsReference(**m, FloatProducts()), 1e-3f);
    EXPECT_TRUE(std::isfinite(CpuBlasVsReference(**m)));
  }
}

// llama-quantize's Q4_K_M and Q5_K_M files of a deepseek2 model whose attn_k_b rows
// (qk_nope 128) and expert / shared-expert down rows (FFN 160, 320) are not whole
// 256-element super-blocks: llama.cpp writes those tensors in its fallbacks (q4_K -> q5_0,
// q5_K -> q5_1, q6_K -> q8_0), as for every Q4_K_M / Q5_K_M file of DeepSeek-V2-Lite or
// Youtu-LLM (qk_nope 128, expert FFN 1408). The files hold q5_0 (Q4_K_M) and q5_1
// (Q5_K_M) tensors, their attn_k_b bytes are kvserve's quantizer's for the same floats
// (model::EncodeRow, llama.cpp's quantize_row_q5_0_ref / q5_1_ref re-derived), and
// cpu_blas with its default integer kernels (8-bit activations) agrees with the
// reference. Every expert is used for every token (4 of 4), so routing has no discrete
// choice that rounding could flip.
TEST(LlamaQuantizeTest, Deepseek2FallbackQ5_0AndQ5_1FilesLoadAndRunOnCpuBlas) {
  const char* tool = QuantizeTool();
  if (tool == nullptr) GTEST_SKIP() << kNoTool;
  TempDir dir;
  // attn_k_b's rows of qk_nope 128, ffn_down_exps' of 160 (and ffn_down_shexp's of 320).
  const bench::SyntheticModelOptions f32 = SmallDeepseek2(/*qk_nope=*/128, /*expert_ffn=*/160,
                                                          /*experts=*/4, /*used=*/4);
  ASSERT_TRUE(bench::WriteSyntheticModel(f32, dir.File("f32.gguf")).ok());
  absl::StatusOr<std::unique_ptr<model::Model>> floats = model::Model::Load(dir.File("f32.gguf"));
  ASSERT_TRUE(floats.ok()) << floats.status();
  struct Case {
    const char* type;
    DType fallback;  // of the q4_K / q5_K tensors whose rows are not super-blocks
  };
  for (const Case& k : {Case{"Q4_K_M", DType::kQ5_0}, Case{"Q5_K_M", DType::kQ5_1}}) {
    SCOPED_TRACE(k.type);
    const std::string file = dir.File(std::string(k.type) + ".gguf");
    ASSERT_EQ(Quantize(tool, dir.File("f32.gguf"), file, k.type), 0);
    absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(file);
    ASSERT_TRUE(m.ok()) << m.status();
    int fallbacks = 0;  // tensors in k.fallback
    int compared = 0;   // attn_k_b tensors compared with our quantizer's bytes
    for (int l = 0; l < 3; ++l) {
      const model::LayerWeights& L = (*m)->weights().layers[static_cast<size_t>(l)];
      // attn_k_b: the fallback of q4_K / q5_K, or q8_0 where the mix picks q6_K.
      EXPECT_TRUE(L.wk_b.type == k.fallback || L.wk_b.type == DType::kQ8_0)
          << l << ": " << model::DTypeName(L.wk_b.type);
      fallbacks += L.wk_b.type == k.fallback;
      if (L.wk_b.type == k.fallback) {
        // The same floats through our quantizer: the same bytes.
        const model::TensorView& w = (*floats)->weights().layers[static_cast<size_t>(l)].wk_b;
        ASSERT_EQ(w.type, DType::kF32);
        const size_t n = static_cast<size_t>(w.rows * w.cols);
        std::vector<uint8_t> ours(model::DTypeBytes(k.fallback, n));
        model::EncodeRow(k.fallback, std::span<const float>(static_cast<const float*>(w.data), n),
                         ours.data());
        const model::TensorView mine{k.fallback, ours.data(), w.rows, w.cols};
        EXPECT_GT(SameFraction(L.wk_b, mine), 0.999) << l;
        ++compared;
      }
      for (const model::TensorView& d : L.expert_down) fallbacks += d.type == k.fallback;
      fallbacks += L.shared_down.type == k.fallback;
    }
    EXPECT_GT(compared, 0) << "no attn_k_b in " << model::DTypeName(k.fallback);
    EXPECT_GT(fallbacks, compared) << "no expert down matrix in " << model::DTypeName(k.fallback);
    std::printf("[  NOTE    ] llama-quantize's deepseek2 %s: %d %s tensors\n", k.type, fallbacks,
                std::string(model::DTypeName(k.fallback)).c_str());
    // Measured 1.6e-2 (Q4_K_M), 1.4e-2 (Q5_K_M).
    ExpectCpuBlasNearReference(**m, k.type);
  }
}

}  // namespace
}  // namespace kvserve
