// The GGUF reader's architecture features: qwen2 (Q/K/V biases, rotate-halves RoPE),
// qwen3 (Q/K norms), qwen3moe (experts), llama's optional biases and Llama 3.x RoPE settings
// (rope_freqs, linear scaling), YaRN, and attention.sliding_window.
#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf_llama.h"
#include "model/kv_layout.h"
#include "model/model.h"
#include "model/testing/gguf_builder.h"

namespace kvserve::model {
namespace {

using testing::GgufBuilder;
using ::testing::HasSubstr;
using testing::MakeTinyLlamaGguf;
using testing::TestValues;
using S = testing::TinyLlamaShape;

absl::StatusOr<std::unique_ptr<Model>> Build(const GgufBuilder& b, std::vector<uint8_t>& bytes) {
  bytes = b.Build();
  absl::StatusOr<GgufFile> f = ParseGguf(std::span<const uint8_t>(bytes.data(), bytes.size()));
  if (!f.ok()) return f.status();
  return ModelFromGguf(*f, nullptr);
}

std::string ErrorOf(const GgufBuilder& b,
                    absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Model>> m = Build(b, bytes);
  if (m.ok()) return "OK";
  EXPECT_EQ(m.status().code(), code) << m.status();
  return std::string(m.status().message());
}

// The tiny llama file as architecture `arch`: its hyperparameter keys under "<arch>.".
GgufBuilder TinyAs(const std::string& arch) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.SetString("general.architecture", arch);
  for (auto [key, value] : {std::pair<const char*, uint32_t>{"context_length", S::kContext},
                            {"embedding_length", S::kDim},
                            {"feed_forward_length", S::kFfn},
                            {"attention.head_count", S::kHeads},
                            {"attention.head_count_kv", S::kKvHeads},
                            {"block_count", S::kLayers},
                            {"rope.dimension_count", S::kHeadDim}}) {
    b.Remove(std::string("llama.") + key);
    b.SetU32(arch + "." + key, value);
  }
  b.Remove("llama.attention.layer_norm_rms_epsilon");
  b.SetF32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  return b;
}

// Adds blk.N.<name> of `n` values to every layer.
void AddPerLayer(GgufBuilder& b, const std::string& name, uint64_t n) {
  for (int l = 0; l < S::kLayers; ++l) {
    b.AddF32Tensor("blk." + std::to_string(l) + "." + name, {n}, TestValues(n, 0.5f + l));
  }
}

TEST(GgufArchTest, Qwen2HasBiasesAndRotateHalves) {
  GgufBuilder b = TinyAs("qwen2");
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.attn_q.bias is missing"));
  AddPerLayer(b, "attn_q.bias", S::kDim);
  AddPerLayer(b, "attn_k.bias", S::kKvDim);
  AddPerLayer(b, "attn_v.bias", S::kKvDim);
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Model>> m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_EQ(c.rope_style, RopeStyle::kRotateHalves);
  EXPECT_TRUE(c.attention_qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ((*m)->weights().layers[1].bk.cols, S::kKvDim);
  EXPECT_NE((*m)->weights().layers[1].bv.data, nullptr);
}

TEST(GgufArchTest, Qwen3HasQkNorms) {
  GgufBuilder b = TinyAs("qwen3");
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.attn_q_norm.weight is missing"));
  AddPerLayer(b, "attn_q_norm.weight", S::kHeadDim);
  AddPerLayer(b, "attn_k_norm.weight", S::kHeadDim + 1);
  EXPECT_THAT(ErrorOf(b),
              HasSubstr("tensor blk.0.attn_k_norm.weight has shape [1, 5], expected [1, 4]"));
  for (int l = 0; l < S::kLayers; ++l)
    b.RemoveTensor("blk." + std::to_string(l) + ".attn_k_norm.weight");
  AddPerLayer(b, "attn_k_norm.weight", S::kHeadDim);
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Model>> m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->config().qk_norm);
  EXPECT_FALSE((*m)->config().attention_qkv_bias);
  EXPECT_EQ((*m)->config().rope_style, RopeStyle::kRotateHalves);
}

// The tiny file as qwen3moe: Q/K norms, no dense FFN, `experts` experts of kFfn / 2
// hidden units (expert_feed_forward_length), 2 used per token.
GgufBuilder TinyMoe(uint64_t experts) {
  GgufBuilder b = TinyAs("qwen3moe");
  AddPerLayer(b, "attn_q_norm.weight", S::kHeadDim);
  AddPerLayer(b, "attn_k_norm.weight", S::kHeadDim);
  b.SetU32("qwen3moe.expert_count", static_cast<uint32_t>(experts));
  b.SetU32("qwen3moe.expert_used_count", 2);
  b.SetU32("qwen3moe.expert_feed_forward_length", S::kFfn / 2);
  const uint64_t ffn = S::kFfn / 2;
  for (int l = 0; l < S::kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* dense : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) {
      b.RemoveTensor(p + dense);
    }
    b.AddF32Tensor(p + "ffn_gate_inp.weight", {S::kDim, experts},
                   TestValues(S::kDim * experts, 0.1f));
    b.AddF32Tensor(p + "ffn_gate_exps.weight", {S::kDim, ffn, experts},
                   TestValues(S::kDim * ffn * experts, 0.2f));
    b.AddF32Tensor(p + "ffn_up_exps.weight", {S::kDim, ffn, experts},
                   TestValues(S::kDim * ffn * experts, 0.3f));
    b.AddF32Tensor(p + "ffn_down_exps.weight", {ffn, S::kDim, experts},
                   TestValues(S::kDim * ffn * experts, 0.4f));
  }
  return b;
}

TEST(GgufArchTest, Qwen3MoeHasExperts) {
  GgufBuilder b = TinyMoe(4);
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Model>> m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.n_experts, 4);
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.ffn_dim, S::kFfn / 2);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.rope_style, RopeStyle::kRotateHalves);
  const LayerWeights& L = (*m)->weights().layers[1];
  EXPECT_EQ(L.w_gate.data, nullptr);
  EXPECT_EQ(L.router.rows, 4);
  ASSERT_EQ(L.expert_down.size(), 4u);
  // Expert e is the e-th [rows, cols] slice of the 3-D tensor.
  const GgufBuilder::Tensor* down = b.FindTensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  const float* want = reinterpret_cast<const float*>(down->data.data());
  EXPECT_EQ(L.expert_down[3].rows, S::kDim);
  EXPECT_EQ(L.expert_down[3].cols, S::kFfn / 2);
  EXPECT_EQ(static_cast<const float*>(L.expert_down[3].data)[5],
            want[3 * S::kDim * S::kFfn / 2 + 5]);
  // Without expert_feed_forward_length: feed_forward_length / expert_used_count.
  b.Remove("qwen3moe.expert_feed_forward_length");
  EXPECT_EQ(ErrorOf(b), "OK");
}

TEST(GgufArchTest, Qwen3MoeMalformedExpertsAreRejected) {
  GgufBuilder b = TinyMoe(4);
  b.SetU32("qwen3moe.expert_used_count", 5);
  EXPECT_THAT(ErrorOf(b),
              HasSubstr("qwen3moe.expert_used_count 5 must be in [1, qwen3moe.expert_count 4]"));
  b = TinyMoe(4);
  b.Remove("qwen3moe.expert_count");
  EXPECT_THAT(ErrorOf(b), HasSubstr("missing metadata key qwen3moe.expert_count"));
  b = TinyMoe(4);
  b.RemoveTensor("blk.1.ffn_up_exps.weight");
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.1.ffn_up_exps.weight is missing"));
  b = TinyMoe(4);
  b.RemoveTensor("blk.0.ffn_gate_inp.weight");
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.ffn_gate_inp.weight is missing"));
  b = TinyMoe(4);
  b.SetU32("qwen3moe.expert_count", 3);
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.ffn_gate_exps.weight has 4 experts, expected 3"));
  b = TinyMoe(4);
  b.RemoveTensor("blk.0.ffn_gate_inp.weight");
  b.AddF32Tensor("blk.0.ffn_gate_inp.weight", {S::kDim, 3}, TestValues(S::kDim * 3, 0.3f));
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.ffn_gate_inp.weight has shape [3, 8], expected "
                                    "[4, 8]"));
  b = TinyMoe(4);
  b.RemoveTensor("blk.0.ffn_down_exps.weight");
  b.AddF32Tensor("blk.0.ffn_down_exps.weight", {S::kFfn / 2, S::kDim, 3},
                 TestValues(S::kDim * S::kFfn / 2 * 3, 0.4f));
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.ffn_down_exps.weight has 3 experts, expected 4"));
  // Far more experts than the config's (one view each would be a list many times the
  // file): refused by the count, before any view is made.
  b = TinyMoe(4);
  b.RemoveTensor("blk.1.ffn_up_exps.weight");
  b.AddF32Tensor("blk.1.ffn_up_exps.weight", {S::kDim, S::kFfn / 2, 4096},
                 TestValues(S::kDim * S::kFfn / 2 * 4096, 0.1f));
  EXPECT_THAT(ErrorOf(b),
              HasSubstr("tensor blk.1.ffn_up_exps.weight has 4096 experts, expected 4"));
  b = TinyMoe(4);
  b.RemoveTensor("blk.0.ffn_gate_exps.weight");
  b.AddF32Tensor("blk.0.ffn_gate_exps.weight", {S::kDim, S::kFfn, 4},
                 TestValues(S::kDim * S::kFfn * 4, 0.2f));
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.ffn_gate_exps.weight (expert 0) has shape [12, "
                                    "8], expected [6, 8]"));
  b = TinyMoe(4);
  b.AddF32Tensor("blk.0.ffn_up.weight", {S::kDim, S::kFfn}, TestValues(S::kDim * S::kFfn, 0.2f));
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.ffn_up.weight is present but the model config "
                                    "has experts instead"));
}

TEST(GgufArchTest, LlamaTakesOptionalBiasesLayerByLayer) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.AddF32Tensor("blk.0.attn_q.bias", {S::kDim}, TestValues(S::kDim, 1.0f));
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.attn_k.bias is missing"));
  AddPerLayer(b, "attn_k.bias", S::kKvDim);
  AddPerLayer(b, "attn_v.bias", S::kKvDim);
  b.AddF32Tensor("blk.1.attn_q.bias", {S::kDim}, TestValues(S::kDim, 2.0f));
  AddPerLayer(b, "attn_output.bias", S::kDim);
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Model>> m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->config().attention_qkv_bias);
  EXPECT_TRUE((*m)->config().attention_output_bias);
  EXPECT_EQ((*m)->config().rope_style, RopeStyle::kAdjacentPairs);
}

TEST(GgufArchTest, Llama3RopeSettings) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.SetF32("llama.rope.freq_base", 500000.0f);
  b.AddF32Tensor("rope_freqs.weight", {S::kHeadDim / 2}, {1.0f, 8.0f});
  b.SetString("llama.rope.scaling.type", "linear");
  b.SetF32("llama.rope.scaling.factor", 4.0f);
  b.SetU32("llama.attention.sliding_window", 6);
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Model>> m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_FLOAT_EQ(c.rope_base, 500000.0f);
  EXPECT_THAT(c.rope_freq_factors, ::testing::ElementsAre(1.0f, 8.0f));
  EXPECT_FLOAT_EQ(c.rope_freq_scale, 0.25f);
  EXPECT_EQ(c.sliding_window, 6);
  EXPECT_EQ(c.FirstVisiblePosition(5), 0);
  EXPECT_EQ(c.FirstVisiblePosition(6), 1);

  b.SetString("llama.rope.scaling.type", "none");
  ASSERT_TRUE((m = Build(b, bytes)).ok());
  EXPECT_FLOAT_EQ((*m)->config().rope_freq_scale, 1.0f);
  b.SetString("llama.rope.scaling.type", "longrope");
  EXPECT_THAT(ErrorOf(b, absl::StatusCode::kUnimplemented),
              HasSubstr("llama.rope.scaling.type \"longrope\" (Phi-3's long and short RoPE "
                        "factors) is not supported yet"));
  b.SetString("llama.rope.scaling.type", "ntk");
  EXPECT_THAT(ErrorOf(b), HasSubstr("llama.rope.scaling.type \"ntk\" is not a RoPE scaling type"));
  b.SetString("llama.rope.scaling.type", "linear");
  b.SetF32("llama.rope.scaling.factor", -1.0f);
  EXPECT_THAT(ErrorOf(b), HasSubstr("llama.rope.scaling.factor must be a positive finite"));
  b.SetF32("llama.rope.scaling.factor", 1.0f);
  b.RemoveTensor("rope_freqs.weight");
  b.AddF32Tensor("rope_freqs.weight", {3}, {1.0f, 2.0f, 3.0f});
  EXPECT_THAT(ErrorOf(b), HasSubstr("rope_freqs.weight must be f32 with 2 elements"));
  b.RemoveTensor("rope_freqs.weight");
  b.AddF32Tensor("rope_freqs.weight", {2}, {1.0f, 0.0f});
  EXPECT_THAT(ErrorOf(b), HasSubstr("rope_freq_factors must be positive"));
}

TEST(GgufArchTest, NegativeWindowIsRejected) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.SetI32("llama.attention.sliding_window", -2);
  EXPECT_THAT(ErrorOf(b), HasSubstr("sliding_window must be >= 0"));
}

// The tiny file as a dense deepseek2 with latent attention: per head 4 dimensions without
// RoPE and 2 with, values of 4, a latent of kLora, a compressed query of kQLora.
constexpr uint64_t kNope = 4, kRope = 2, kVHead = 4, kLora = 4, kQLora = 6;
GgufBuilder TinyDeepseek2() {
  GgufBuilder b = TinyAs("deepseek2");
  const uint64_t heads = S::kHeads, dim = S::kDim, head = kNope + kRope;
  b.SetU32("deepseek2.rope.dimension_count", kRope);
  b.SetU32("deepseek2.attention.kv_lora_rank", kLora);
  b.SetU32("deepseek2.attention.q_lora_rank", kQLora);
  b.SetU32("deepseek2.attention.key_length", kLora + kRope);
  b.SetU32("deepseek2.attention.value_length", kLora);
  b.SetU32("deepseek2.attention.key_length_mla", head);
  b.SetU32("deepseek2.attention.value_length_mla", kVHead);
  b.SetU32("deepseek2.leading_dense_block_count", S::kLayers);
  for (int l = 0; l < S::kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* t : {"attn_q.weight", "attn_k.weight", "attn_v.weight"}) {
      b.RemoveTensor(p + t);
    }
    b.AddF32Tensor(p + "attn_q_a.weight", {dim, kQLora}, TestValues(dim * kQLora, 0.1f));
    b.AddF32Tensor(p + "attn_q_a_norm.weight", {kQLora}, TestValues(kQLora, 1.0f));
    b.AddF32Tensor(p + "attn_q_b.weight", {kQLora, heads * head},
                   TestValues(kQLora * heads * head, 0.2f));
    b.AddF32Tensor(p + "attn_kv_a_mqa.weight", {dim, kLora + kRope},
                   TestValues(dim * (kLora + kRope), 0.3f));
    b.AddF32Tensor(p + "attn_kv_a_norm.weight", {kLora}, TestValues(kLora, 1.0f));
    b.AddF32Tensor(p + "attn_k_b.weight", {kNope, kLora, heads},
                   TestValues(kNope * kLora * heads, 0.4f));
    b.AddF32Tensor(p + "attn_v_b.weight", {kLora, kVHead, heads},
                   TestValues(kLora * kVHead * heads, 0.5f));
  }
  return b;
}

TEST(GgufArchTest, Deepseek2HasLatentAttention) {
  GgufBuilder b = TinyDeepseek2();
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Model>> m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_TRUE(c.mla());
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_EQ(c.kv_lora_rank, static_cast<int>(kLora));
  EXPECT_EQ(c.q_lora_rank, static_cast<int>(kQLora));
  EXPECT_EQ(c.head_dim, static_cast<int>(kNope + kRope));
  EXPECT_EQ(c.v_head_dim, static_cast<int>(kVHead));
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.kv_dim(), static_cast<int>(kLora + kRope));  // the cached row: c ‖ k_pe
  EXPECT_EQ(c.kv_planes(), 1);
  const LayerWeights& L = (*m)->weights().layers[1];
  EXPECT_EQ(L.wk_b.rows, static_cast<int64_t>(S::kHeads * kLora));
  EXPECT_EQ(L.wk_b.cols, static_cast<int64_t>(kNope));
  EXPECT_EQ(L.wv_b.rows, static_cast<int64_t>(S::kHeads * kVHead));
  EXPECT_EQ(L.wq.data, nullptr);
  // One plane of kv_dim per layer: half the bytes of a K and V layout of that width.
  const KvLayout layout = KvLayout::ForModel(c, 16, DType::kF32);
  EXPECT_EQ(layout.planes, 1);
  EXPECT_EQ(layout.token_bytes(), S::kLayers * (kLora + kRope) * sizeof(float));
  EXPECT_EQ(layout.block_bytes(), 16 * layout.token_bytes());
}

TEST(GgufArchTest, Deepseek2WithoutQueryCompressionReadsAttnQ) {
  GgufBuilder b = TinyDeepseek2();
  b.Remove("deepseek2.attention.q_lora_rank");
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.attn_q.weight is missing"));
  const uint64_t q_dim = S::kHeads * (kNope + kRope);
  for (int l = 0; l < S::kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    b.AddF32Tensor(p + "attn_q.weight", {S::kDim, q_dim}, TestValues(S::kDim * q_dim, 0.6f));
  }
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Model>> m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().q_lora_rank, 0);
  EXPECT_NE((*m)->weights().layers[0].wq.data, nullptr);
}

TEST(GgufArchTest, Deepseek2MalformedFilesAreRejected) {
  GgufBuilder b = TinyDeepseek2();
  b.Remove("deepseek2.attention.key_length_mla");
  EXPECT_THAT(ErrorOf(b, absl::StatusCode::kUnimplemented), HasSubstr("older attn_kv_b form"));
  b = TinyDeepseek2();
  b.SetU32("deepseek2.attention.key_length", 7);
  EXPECT_THAT(ErrorOf(b), HasSubstr("deepseek2.attention.key_length 7 must be 6"));
  b = TinyDeepseek2();
  b.Remove("deepseek2.attention.kv_lora_rank");
  EXPECT_THAT(ErrorOf(b), HasSubstr("missing metadata key deepseek2.attention.kv_lora_rank"));
  // A rank near INT_MAX: refused (its key width computed without overflow; the UB
  // sanitizer of the ASan build fails this test otherwise).
  b = TinyDeepseek2();
  b.SetU32("deepseek2.attention.kv_lora_rank", 0x7fffffff);
  EXPECT_THAT(ErrorOf(b), HasSubstr("kv_lora_rank 2147483647"));
  b = TinyDeepseek2();
  b.SetU32("deepseek2.rope.dimension_count", kNope + kRope);
  b.SetU32("deepseek2.attention.key_length", kLora + kNope + kRope);
  EXPECT_THAT(ErrorOf(b), HasSubstr("latent attention needs rope_dim 6 below head_dim 6"));
  b = TinyDeepseek2();
  b.RemoveTensor("blk.1.attn_k_b.weight");
  b.AddF32Tensor("blk.1.attn_k_b.weight", {kNope, kLora, 1}, TestValues(kNope * kLora, 0.4f));
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.1.attn_k_b.weight has shape [4, 4], expected "
                                    "[8, 4]"));
}

// YaRN's keys, and the magnitudes llama.cpp derives from them, computed by hand:
// factor 4, ln 4 = 1.3862944.
TEST(GgufArchTest, LlamaYarnKeys) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.SetString("llama.rope.scaling.type", "yarn");
  b.SetF32("llama.rope.scaling.factor", 4.0f);
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Model>> m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig* c = &(*m)->config();
  EXPECT_EQ(c->yarn_ext_factor, 1.0f);
  EXPECT_EQ(c->rope_freq_scale, 0.25f);
  EXPECT_EQ(c->yarn_beta_fast, 32.0f);
  EXPECT_EQ(c->yarn_beta_slow, 1.0f);
  EXPECT_EQ(c->YarnOrigContextLength(), static_cast<int>(S::kContext));
  // 1 + 0.1 ln 4 on cos and sin; q·k keeps 1 / sqrt(head_dim).
  EXPECT_NEAR(c->RopeMagnitude(), 1.13862944f, 1e-6f);
  EXPECT_FLOAT_EQ(c->AttentionScale(), 1.0f / std::sqrt(static_cast<float>(S::kHeadDim)));
  const uint64_t fingerprint = (*m)->fingerprint();

  b.SetU32("llama.rope.scaling.original_context_length", 8);
  b.SetF32("llama.rope.scaling.attn_factor", 0.5f);
  ASSERT_TRUE((m = Build(b, bytes)).ok()) << m.status();
  c = &(*m)->config();
  EXPECT_EQ(c->YarnOrigContextLength(), 8);
  EXPECT_NEAR(c->RopeMagnitude(), 0.5f * 1.13862944f, 1e-6f);
  EXPECT_NE((*m)->fingerprint(), fingerprint);

  // attn_factor applies without YaRN too; "none" ignores the factor.
  b.SetString("llama.rope.scaling.type", "none");
  ASSERT_TRUE((m = Build(b, bytes)).ok()) << m.status();
  EXPECT_EQ((*m)->config().yarn_ext_factor, 0.0f);
  EXPECT_EQ((*m)->config().rope_freq_scale, 1.0f);
  EXPECT_EQ((*m)->config().RopeMagnitude(), 0.5f);
}

TEST(GgufArchTest, Deepseek2YarnMovesTheMagnitudeIntoTheAttentionScale) {
  GgufBuilder b = TinyDeepseek2();
  b.SetString("deepseek2.rope.scaling.type", "yarn");
  b.SetF32("deepseek2.rope.scaling.factor", 4.0f);
  b.SetU32("deepseek2.rope.scaling.original_context_length", 4);
  // The converter writes 0.1 * mscale_all_dim (0.707).
  b.SetF32("deepseek2.rope.scaling.yarn_log_multiplier", 0.0707f);
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Model>> m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_NEAR(c.yarn_log_multiplier, 0.707f, 1e-6f);
  EXPECT_EQ(c.YarnOrigContextLength(), 4);
  // The RoPE parts keep magnitude 1; q·k takes mscale^2 = (1 + 0.0707 ln 4)^2 = 1.098011^2.
  EXPECT_NEAR(c.RopeMagnitude(), 1.0f, 1e-6f);
  const float head = static_cast<float>(kNope + kRope);
  EXPECT_NEAR(c.AttentionScale() * std::sqrt(head), 1.205628f, 1e-5f);

  // Without the log multiplier: cos and sin take 1 + 0.1 ln 4, and so does kq_scale, squared.
  b.Remove("deepseek2.rope.scaling.yarn_log_multiplier");
  ASSERT_TRUE((m = Build(b, bytes)).ok()) << m.status();
  EXPECT_NEAR((*m)->config().RopeMagnitude(), 1.13862944f, 1e-6f);
  EXPECT_NEAR((*m)->config().AttentionScale() * std::sqrt(head), 1.13862944f * 1.13862944f, 1e-5f);

  // Other architectures do not read the multiplier (as llama.cpp).
  GgufBuilder llama = MakeTinyLlamaGguf();
  llama.SetString("llama.rope.scaling.type", "yarn");
  llama.SetF32("llama.rope.scaling.factor", 4.0f);
  llama.SetF32("llama.rope.scaling.yarn_log_multiplier", 0.0707f);
  ASSERT_TRUE((m = Build(llama, bytes)).ok()) << m.status();
  EXPECT_EQ((*m)->config().yarn_log_multiplier, 0.0f);
}

// TinyDeepseek2 with layer 0 dense and layer 1 a mixture of kExperts experts of kFfn / 2
// hidden units, 2 per token, one shared expert, sigmoid gating with the selection bias.
constexpr uint64_t kExperts = 4;
GgufBuilder TinyDeepseek2Moe() {
  GgufBuilder b = TinyDeepseek2();
  const uint64_t ffn = S::kFfn / 2, dim = S::kDim, e = kExperts;
  b.SetU32("deepseek2.leading_dense_block_count", 1);
  b.SetU32("deepseek2.expert_count", kExperts);
  b.SetU32("deepseek2.expert_used_count", 2);
  b.SetU32("deepseek2.expert_feed_forward_length", ffn);
  b.SetU32("deepseek2.expert_shared_count", 1);
  b.SetF32("deepseek2.expert_weights_scale", 2.5f);
  b.SetBool("deepseek2.expert_weights_norm", true);
  b.SetU32("deepseek2.expert_gating_func", 2);
  for (const char* dense : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) {
    b.RemoveTensor(std::string("blk.1.") + dense);
  }
  b.AddF32Tensor("blk.1.ffn_gate_inp.weight", {dim, e}, TestValues(dim * e, 0.1f));
  b.AddF32Tensor("blk.1.exp_probs_b.bias", {e}, TestValues(e, 0.05f));
  b.AddF32Tensor("blk.1.ffn_gate_exps.weight", {dim, ffn, e}, TestValues(dim * ffn * e, 0.2f));
  b.AddF32Tensor("blk.1.ffn_up_exps.weight", {dim, ffn, e}, TestValues(dim * ffn * e, 0.3f));
  b.AddF32Tensor("blk.1.ffn_down_exps.weight", {ffn, dim, e}, TestValues(dim * ffn * e, 0.4f));
  b.AddF32Tensor("blk.1.ffn_gate_shexp.weight", {dim, ffn}, TestValues(dim * ffn, 0.5f));
  b.AddF32Tensor("blk.1.ffn_up_shexp.weight", {dim, ffn}, TestValues(dim * ffn, 0.6f));
  b.AddF32Tensor("blk.1.ffn_down_shexp.weight", {ffn, dim}, TestValues(dim * ffn, 0.7f));
  return b;
}

TEST(GgufArchTest, Deepseek2HasExpertsAfterTheLeadingDenseLayers) {
  GgufBuilder b = TinyDeepseek2Moe();
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Model>> m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.n_experts, static_cast<int>(kExperts));
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.ffn_dim, S::kFfn / 2);
  EXPECT_EQ(c.n_dense_layers, 1);
  EXPECT_EQ(c.dense_ffn_dim, S::kFfn);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.expert_gating, ExpertGating::kSigmoid);
  EXPECT_TRUE(c.expert_probs_bias);
  EXPECT_TRUE(c.expert_weights_norm);
  EXPECT_FLOAT_EQ(c.expert_weights_scale, 2.5f);
  EXPECT_FALSE(c.LayerHasExperts(0));
  EXPECT_TRUE(c.LayerHasExperts(1));
  const LayerWeights& dense = (*m)->weights().layers[0];
  EXPECT_EQ(dense.w_gate.rows, S::kFfn);
  EXPECT_TRUE(dense.expert_gate.empty());
  const LayerWeights& L = (*m)->weights().layers[1];
  EXPECT_EQ(L.w_gate.data, nullptr);
  EXPECT_EQ(L.expert_down.size(), kExperts);
  EXPECT_EQ(L.shared_down.rows, S::kDim);
  EXPECT_EQ(L.shared_down.cols, S::kFfn / 2);
  EXPECT_EQ(L.expert_probs_bias.cols, static_cast<int64_t>(kExperts));
  // llama.cpp's defaults: softmax, unnormalized, unscaled (0 = 1).
  for (const char* key : {"deepseek2.expert_gating_func", "deepseek2.expert_weights_norm",
                          "deepseek2.expert_weights_scale"}) {
    b.Remove(key);
  }
  m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().expert_gating, ExpertGating::kSoftmax);
  EXPECT_FALSE((*m)->config().expert_weights_norm);
  EXPECT_FLOAT_EQ((*m)->config().expert_weights_scale, 1.0f);
  // Group limits are read (2 groups of 2: one kept).
  b.SetU32("deepseek2.expert_group_count", 2);
  b.SetU32("deepseek2.expert_group_used_count", 1);
  m = Build(b, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().n_expert_groups, 2);
  EXPECT_EQ((*m)->config().n_expert_groups_used, 1);
}

TEST(GgufArchTest, Deepseek2MalformedExpertsAreRejected) {
  GgufBuilder b = TinyDeepseek2Moe();
  b.SetU32("deepseek2.expert_gating_func", 3);
  EXPECT_THAT(ErrorOf(b, absl::StatusCode::kUnimplemented),
              HasSubstr("deepseek2.expert_gating_func 3 is not supported"));
  b = TinyDeepseek2Moe();
  b.Remove("deepseek2.expert_shared_count");
  EXPECT_THAT(ErrorOf(b), HasSubstr("missing metadata key deepseek2.expert_shared_count"));
  b = TinyDeepseek2Moe();
  b.Remove("deepseek2.expert_count");
  EXPECT_THAT(ErrorOf(b), HasSubstr("missing metadata key deepseek2.expert_count"));
  b = TinyDeepseek2Moe();
  b.SetU32("deepseek2.nextn_predict_layers", 1);
  EXPECT_THAT(ErrorOf(b, absl::StatusCode::kUnimplemented), HasSubstr("multi-token prediction"));
  b = TinyDeepseek2Moe();
  b.RemoveTensor("blk.1.ffn_up_shexp.weight");
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.1.ffn_up_shexp.weight is missing"));
  b = TinyDeepseek2Moe();
  b.SetU32("deepseek2.expert_shared_count", 2);
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.1.ffn_gate_shexp.weight has shape [6, 8], "
                                    "expected [12, 8]"));
  b = TinyDeepseek2Moe();
  b.AddF32Tensor("blk.0.exp_probs_b.bias", {kExperts}, TestValues(kExperts, 0.05f));
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.exp_probs_b.bias is present"));
  b = TinyDeepseek2Moe();
  b.SetU32("deepseek2.expert_group_count", 2);
  b.SetU32("deepseek2.expert_group_used_count", 2);
  EXPECT_THAT(ErrorOf(b), HasSubstr("n_expert_groups 2 must divide"));
  b = TinyDeepseek2Moe();
  b.SetU32("deepseek2.leading_dense_block_count", 0);
  EXPECT_THAT(ErrorOf(b), HasSubstr("tensor blk.0.ffn_gate.weight is present but the model "
                                    "config has experts instead"));
  b = TinyDeepseek2Moe();
  b.AddF32Tensor("blk.1.ffn_gate_up_exps.weight", {S::kDim, S::kFfn, kExperts},
                 TestValues(S::kDim * S::kFfn * kExperts, 0.2f));
  EXPECT_THAT(ErrorOf(b, absl::StatusCode::kUnimplemented),
              HasSubstr("fused gate and up experts are not supported"));
}

}  // namespace
}  // namespace kvserve::model
