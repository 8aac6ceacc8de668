// Builds small llama models with seeded random weights in memory, for tests and tools
// that must not depend on a model file.
#ifndef KVSERVE_BACKENDS_TESTING_RANDOM_MODEL_H_
#define KVSERVE_BACKENDS_TESTING_RANDOM_MODEL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/dtype.h"
#include "model/model.h"
#include "model/model_config.h"

namespace kvserve::backends::testing {

struct RandomModelOptions {
  // Shape. Defaults: a tiny GQA model (dim 32, 2 layers, 4 query heads, 2 KV heads,
  // head_dim 8, ffn 64, vocab 64, context 128, rope_dim = head_dim, adjacent pairs).
  // Architecture features come from the config too: attention_qkv_bias and
  // attention_output_bias add biases in [-0.5, 0.5], qk_norm adds Q/K norm gains in
  // [0.5, 1.5]; rope_freq_factors and sliding_window are used as given; n_experts > 0
  // gives a router (f32, 4x the projections' range) and experts instead of the dense FFN
  // (after n_dense_layers), shared experts when n_shared_experts > 0 and a selection bias
  // in [-0.2, 0.2] when expert_probs_bias.
  model::ModelConfig config = DefaultConfig();
  // Element type of the matrices (norm gains are always f32): any model::DType (a
  // quantized type needs dim, q_dim and ffn_dim multiples of its block: 32 for q8_0,
  // q4_0, q5_0 and q5_1, 256 for q4_k, q5_k and q6_k). Default kF32.
  model::DType dtype = model::DType::kF32;
  // When true, output aliases token_embedding (and config.tied_embeddings is set).
  bool tied = false;
  // Projections are uniform in [-scale, scale] / sqrt(fan_in), the embedding in [-1, 1],
  // norm gains in [0.5, 1.5]. Values come from `seed` through splitmix64, so they are the
  // same on every platform.
  uint64_t seed = 1;
  float scale = 1.0f;

  static model::ModelConfig DefaultConfig();
};

// A small config for each architecture feature set the backends implement, for tests
// that must cover them all (reference against the textbook pass, cpu_blas against the
// reference):
//   llama   DefaultConfig()
//   llama3  rope_base 500000, rope_freq_factors (Llama 3.x shape), rope_freq_scale 0.5,
//           Q/K/V and output biases
//   qwen2   rotate-halves RoPE, Q/K/V biases
//   qwen3   rotate-halves RoPE, Q/K norms, head_dim 16 (not dim / n_heads), partial RoPE
//   local   llama with sliding_window 5
//   qwen3moe  qwen3 with 8 experts of ffn_dim 32, 3 used per token (router in f32)
//   deepseek2, deepseek2_q  latent attention with and without q_lora_rank (the latter
//           with a window)
//   deepseek2_moe  deepseek2 with a dense first layer, then experts and shared experts
//   deepseek3_moe  the same with sigmoid gating, the selection bias and expert groups
//   yarn    llama with YaRN (factor 4, original context 64) and rope_attn_factor 0.9
//   deepseek2_yarn  deepseek2 with YaRN (factor 4, original context 64) and a
//           yarn_log_multiplier
struct NamedConfig {
  std::string name;
  model::ModelConfig config;
};
std::vector<NamedConfig> ArchitectureConfigs();

// `c`, a config with experts, given deepseek2's features with DeepSeek-V3's routing:
// layer 0 dense of `dense_ffn` hidden units, 2 shared experts, sigmoid gating with the
// selection bias, 4 expert groups of which 2 are kept, weights scaled by 2.5.
// Precondition: n_experts a multiple of 4 and at least 8; n_layers >= 2.
model::ModelConfig WithDeepseekV3Routing(model::ModelConfig c, int dense_ffn);

// Deterministic for given options (same seed, same bytes, same fingerprint). The
// vocabulary has <unk>=0, <s>=1, </s>=2, then byte tokens <0x00>..<0xFF> while they fit,
// then pieces "▁t<N>". Errors: whatever model::Model::FromParts reports for a bad shape.
absl::StatusOr<std::unique_ptr<model::Model>> MakeRandomModel(const RandomModelOptions& options);

// The bytes of `values` stored as `dtype` (model::EncodeRow: f32, f16 and bf16 round to
// nearest even; quantized types as llama.cpp's reference quantizers).
// Precondition: values.size() is a multiple of model::DTypeBlockElems(dtype).
std::vector<uint8_t> EncodeRow(std::span<const float> values, model::DType dtype);

}  // namespace kvserve::backends::testing

#endif  // KVSERVE_BACKENDS_TESTING_RANDOM_MODEL_H_
