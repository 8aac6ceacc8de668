#include "backends/testing/random_model.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/quant.h"

namespace kvserve::backends::testing {
namespace {

using model::DType;
using model::TensorView;

// splitmix64: a tiny generator whose output is the same on every platform
// (std::uniform_real_distribution is not).
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float Symmetric() {
    return static_cast<float>(static_cast<double>(Next() >> 11) * 0x1.0p-52 - 1.0);
  }

 private:
  uint64_t state_;
};

// Owns every tensor's bytes; the Model keeps it alive through `storage`.
struct Storage {
  std::vector<std::vector<uint8_t>> buffers;  // one per tensor; moves keep data() stable
};

TensorView AddTensor(Storage& storage, Random& rng, DType dtype, int64_t rows, int64_t cols,
                     float lo, float hi) {
  std::vector<uint8_t>& bytes = storage.buffers.emplace_back();
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = lo + (hi - lo) * 0.5f * (rng.Symmetric() + 1.0f);
    std::vector<uint8_t> encoded = EncodeRow(row, dtype);
    bytes.insert(bytes.end(), encoded.begin(), encoded.end());
  }
  return TensorView{dtype, bytes.data(), rows, cols};
}

// A projection [rows, cols] with entries in [-scale, scale] / sqrt(cols).
TensorView AddMatrix(Storage& storage, Random& rng, DType dtype, int64_t rows, int64_t cols,
                     float scale) {
  const float bound = scale / std::sqrt(static_cast<float>(cols));
  return AddTensor(storage, rng, dtype, rows, cols, -bound, bound);
}

TensorView AddNorm(Storage& storage, Random& rng, int64_t dim) {
  return AddTensor(storage, rng, DType::kF32, 1, dim, 0.5f, 1.5f);
}

model::Vocabulary MakeVocabulary(int vocab_size) {
  model::Vocabulary vocab;
  for (int i = 0; i < vocab_size; ++i) {
    std::string piece;
    model::TokenKind kind = model::TokenKind::kNormal;
    if (i == 0) {
      piece = "<unk>";
      kind = model::TokenKind::kUnknown;
    } else if (i == 1 || i == 2) {
      piece = i == 1 ? "<s>" : "</s>";
      kind = model::TokenKind::kControl;
    } else if (i < 3 + 256) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const int byte = i - 3;
      piece = absl::StrCat("<0x", std::string(1, kHex[byte >> 4]), std::string(1, kHex[byte & 15]),
                           ">");
      kind = model::TokenKind::kByte;
    } else {
      piece = absl::StrCat("\xE2\x96\x81t", i);  // "▁t<N>"
    }
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(kind == model::TokenKind::kNormal ? -static_cast<float>(i) : 0.0f);
    vocab.kinds.push_back(kind);
  }
  vocab.unk_id = 0;
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  return vocab;
}

}  // namespace

model::ModelConfig RandomModelOptions::DefaultConfig() {
  model::ModelConfig c;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_dim = 64;
  c.vocab_size = 64;
  c.context_length = 128;
  c.rope_dim = 8;
  return c;
}

std::vector<NamedConfig> ArchitectureConfigs() {
  const model::ModelConfig base = RandomModelOptions::DefaultConfig();
  model::ModelConfig llama3 = base;
  llama3.rope_base = 500000.0f;
  llama3.rope_freq_scale = 0.5f;
  llama3.rope_freq_factors = {1.0f, 1.5f, 4.0f, 8.0f};  // [rope_dim / 2]
  llama3.attention_qkv_bias = true;
  llama3.attention_output_bias = true;
  model::ModelConfig qwen2 = base;
  qwen2.architecture = "qwen2";
  qwen2.rope_style = model::RopeStyle::kRotateHalves;
  qwen2.attention_qkv_bias = true;
  model::ModelConfig qwen3 = base;
  qwen3.architecture = "qwen3";
  qwen3.rope_style = model::RopeStyle::kRotateHalves;
  qwen3.qk_norm = true;
  qwen3.head_dim = 16;
  qwen3.rope_dim = 12;
  model::ModelConfig local = base;
  local.sliding_window = 5;
  model::ModelConfig qwen3moe = qwen3;
  qwen3moe.architecture = "qwen3moe";
  qwen3moe.n_experts = 8;
  qwen3moe.n_experts_used = 3;
  qwen3moe.ffn_dim = 32;
  // Latent attention: 4 heads of 6 + 4 dimensions, values of 8, a latent of 16, a
  // compressed query of 24.
  model::ModelConfig deepseek2 = base;
  deepseek2.architecture = "deepseek2";
  deepseek2.n_kv_heads = 1;
  deepseek2.head_dim = 10;
  deepseek2.rope_dim = 4;
  deepseek2.v_head_dim = 8;
  deepseek2.kv_lora_rank = 16;
  deepseek2.q_lora_rank = 24;
  model::ModelConfig deepseek2_q = deepseek2;  // a plain attn_q, and a window
  deepseek2_q.q_lora_rank = 0;
  deepseek2_q.sliding_window = 5;
  // DeepSeek-V2's experts: a dense first layer, then 6 experts of 16, 2 per token, and
  // 2 shared experts; softmax gating, unnormalized weights scaled by 1.5.
  model::ModelConfig deepseek2_moe = deepseek2;
  deepseek2_moe.n_layers = 3;
  deepseek2_moe.n_experts = 6;
  deepseek2_moe.n_experts_used = 2;
  deepseek2_moe.ffn_dim = 16;
  deepseek2_moe.n_dense_layers = 1;
  deepseek2_moe.dense_ffn_dim = 64;
  deepseek2_moe.n_shared_experts = 2;
  deepseek2_moe.expert_weights_norm = false;
  deepseek2_moe.expert_weights_scale = 1.5f;
  // DeepSeek-V3's routing: sigmoid gating, the selection bias, 3 groups of 2 experts of
  // which 2 are kept, 3 experts per token, normalized weights scaled by 2.5, one shared
  // expert.
  model::ModelConfig deepseek3_moe = deepseek2_moe;
  deepseek3_moe.n_shared_experts = 1;
  deepseek3_moe.expert_gating = model::ExpertGating::kSigmoid;
  deepseek3_moe.expert_probs_bias = true;
  deepseek3_moe.n_expert_groups = 3;
  deepseek3_moe.n_expert_groups_used = 2;
  deepseek3_moe.n_experts_used = 3;
  deepseek3_moe.expert_weights_norm = true;
  deepseek3_moe.expert_weights_scale = 2.5f;
  // YaRN with an original context of 64: its correction range is pairs [0, 2] of 4, so
  // pair 0 keeps its angle, pair 1 mixes half and half, pairs 2 and 3 are scaled by 1/4.
  model::ModelConfig yarn = base;
  yarn.rope_freq_scale = 0.25f;
  yarn.yarn_ext_factor = 1.0f;
  yarn.yarn_orig_context_length = 64;
  yarn.rope_attn_factor = 0.9f;
  model::ModelConfig deepseek2_yarn = deepseek2;  // kq_scale takes YaRN's mscale^2
  deepseek2_yarn.rope_freq_scale = 0.25f;
  deepseek2_yarn.yarn_ext_factor = 1.0f;
  deepseek2_yarn.yarn_orig_context_length = 64;
  deepseek2_yarn.yarn_log_multiplier = 0.707f;
  return {{"llama", base},
          {"llama3", llama3},
          {"qwen2", qwen2},
          {"qwen3", qwen3},
          {"local", local},
          {"qwen3moe", qwen3moe},
          {"deepseek2", deepseek2},
          {"deepseek2_q", deepseek2_q},
          {"deepseek2_moe", deepseek2_moe},
          {"deepseek3_moe", deepseek3_moe},
          {"yarn", yarn},
          {"deepseek2_yarn", deepseek2_yarn}};
}

model::ModelConfig WithDeepseekV3Routing(model::ModelConfig c, int dense_ffn) {
  c.n_dense_layers = 1;
  c.dense_ffn_dim = dense_ffn;
  c.n_shared_experts = 2;
  c.expert_gating = model::ExpertGating::kSigmoid;
  c.expert_probs_bias = true;
  c.n_expert_groups = 4;
  c.n_expert_groups_used = 2;
  c.expert_weights_scale = 2.5f;
  return c;
}

std::vector<uint8_t> EncodeRow(std::span<const float> values, DType dtype) {
  std::vector<uint8_t> out(model::DTypeBytes(dtype, values.size()));
  model::EncodeRow(dtype, values, out.data());
  return out;
}

namespace {

// The latent attention tensors of one layer (model/weights.h), in that order.
void AddLatentAttention(const model::ModelConfig& c, Storage& storage, Random& rng, DType dt,
                        float scale, model::LayerWeights& L) {
  const int r = c.kv_lora_rank;
  if (c.q_lora_rank > 0) {
    L.wq_a = AddMatrix(storage, rng, dt, c.q_lora_rank, c.dim, scale);
    L.q_a_norm = AddNorm(storage, rng, c.q_lora_rank);
    L.wq_b = AddMatrix(storage, rng, dt, c.q_dim(), c.q_lora_rank, scale);
  } else {
    L.wq = AddMatrix(storage, rng, dt, c.q_dim(), c.dim, scale);
  }
  L.wkv_a = AddMatrix(storage, rng, dt, r + c.rope_dim, c.dim, scale);
  L.kv_a_norm = AddNorm(storage, rng, r);
  L.wk_b = AddMatrix(storage, rng, dt, c.n_heads * r, c.head_dim - c.rope_dim, scale);
  L.wv_b = AddMatrix(storage, rng, dt, c.n_heads * c.v_head_dim, r, scale);
}

}  // namespace

absl::StatusOr<std::unique_ptr<model::Model>> MakeRandomModel(const RandomModelOptions& options) {
  model::ModelConfig config = options.config;
  config.tied_embeddings = options.tied;
  if (absl::Status s = config.Validate(); !s.ok()) return s;

  auto storage = std::make_shared<Storage>();
  Random rng(options.seed);
  const DType dt = options.dtype;
  const float scale = options.scale;
  model::ModelWeights w;
  // Embedding rows in [-1, 1] so that the residual stream starts at unit scale.
  w.token_embedding = AddTensor(*storage, rng, dt, config.vocab_size, config.dim, -1.0f, 1.0f);
  for (int l = 0; l < config.n_layers; ++l) {
    model::LayerWeights L;
    L.attn_norm = AddNorm(*storage, rng, config.dim);
    if (config.mla()) {
      AddLatentAttention(config, *storage, rng, dt, scale, L);
    } else {
      L.wq = AddMatrix(*storage, rng, dt, config.q_dim(), config.dim, scale);
      L.wk = AddMatrix(*storage, rng, dt, config.kv_dim(), config.dim, scale);
      L.wv = AddMatrix(*storage, rng, dt, config.kv_dim(), config.dim, scale);
    }
    L.wo = AddMatrix(*storage, rng, dt, config.dim, config.attn_out_dim(), scale);
    L.ffn_norm = AddNorm(*storage, rng, config.dim);
    if (config.LayerHasExperts(l)) {
      // The router in f32, as llama.cpp's quantizers keep ffn_gate_inp; logits of a few
      // units so that the top experts stand apart.
      L.router = AddMatrix(*storage, rng, DType::kF32, config.n_experts, config.dim, 4 * scale);
      for (int e = 0; e < config.n_experts; ++e) {
        L.expert_gate.push_back(AddMatrix(*storage, rng, dt, config.ffn_dim, config.dim, scale));
        L.expert_up.push_back(AddMatrix(*storage, rng, dt, config.ffn_dim, config.dim, scale));
        L.expert_down.push_back(AddMatrix(*storage, rng, dt, config.dim, config.ffn_dim, scale));
      }
      // deepseek2's features after qwen3moe's, which keep their weights.
      const int shared = config.shared_ffn_dim();
      if (shared > 0) {
        L.shared_gate = AddMatrix(*storage, rng, dt, shared, config.dim, scale);
        L.shared_up = AddMatrix(*storage, rng, dt, shared, config.dim, scale);
        L.shared_down = AddMatrix(*storage, rng, dt, config.dim, shared, scale);
      }
      if (config.expert_probs_bias) {
        L.expert_probs_bias =
            AddTensor(*storage, rng, DType::kF32, 1, config.n_experts, -0.2f, 0.2f);
      }
    } else {
      const int ffn = config.DenseFfnDim();
      L.w_gate = AddMatrix(*storage, rng, dt, ffn, config.dim, scale);
      L.w_up = AddMatrix(*storage, rng, dt, ffn, config.dim, scale);
      L.w_down = AddMatrix(*storage, rng, dt, config.dim, ffn, scale);
    }
    // Architecture features, drawn after the common tensors so that a plain llama config
    // gives the same weights as before they existed.
    if (config.attention_qkv_bias) {
      L.bq = AddTensor(*storage, rng, DType::kF32, 1, config.q_dim(), -0.5f, 0.5f);
      L.bk = AddTensor(*storage, rng, DType::kF32, 1, config.kv_dim(), -0.5f, 0.5f);
      L.bv = AddTensor(*storage, rng, DType::kF32, 1, config.kv_dim(), -0.5f, 0.5f);
    }
    if (config.attention_output_bias) {
      L.bo = AddTensor(*storage, rng, DType::kF32, 1, config.dim, -0.5f, 0.5f);
    }
    if (config.qk_norm) {
      L.q_norm = AddNorm(*storage, rng, config.head_dim);
      L.k_norm = AddNorm(*storage, rng, config.head_dim);
    }
    w.layers.push_back(L);
  }
  w.output_norm = AddNorm(*storage, rng, config.dim);
  w.output = options.tied ? w.token_embedding
                          : AddMatrix(*storage, rng, dt, config.vocab_size, config.dim, scale);
  return model::Model::FromParts(std::move(config), std::move(w),
                                 MakeVocabulary(options.config.vocab_size), std::move(storage));
}

}  // namespace kvserve::backends::testing
