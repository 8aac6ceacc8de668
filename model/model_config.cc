#include "model/model_config.h"

#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

absl::Status Positive(const char* name, int v) {
  if (v > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model config: ", name, " must be positive, got ", v));
}

// The YaRN and RoPE magnitude fields of `c` (part of Validate).
absl::Status ValidateRopeScaling(const ModelConfig& c) {
  for (auto [name, v] : {std::pair<const char*, float>{"yarn_ext_factor", c.yarn_ext_factor},
                         {"yarn_beta_fast", c.yarn_beta_fast},
                         {"yarn_beta_slow", c.yarn_beta_slow}}) {
    if (!(v >= 0.0f) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: ", name, " must be a finite number >= 0, got ", v));
    }
  }
  if (!std::isfinite(c.yarn_log_multiplier)) {
    return absl::InvalidArgumentError("model config: yarn_log_multiplier must be finite");
  }
  if (c.yarn_orig_context_length < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: yarn_orig_context_length must be >= 0 (0 = context_length), "
                     "got ",
                     c.yarn_orig_context_length));
  }
  if (!(c.rope_attn_factor > 0.0f) || !std::isfinite(c.rope_attn_factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: rope_attn_factor must be a positive finite number, got ",
                     c.rope_attn_factor));
  }
  return absl::OkStatus();
}

// llama.cpp's cparams.yarn_attn_factor (llama_context's constructor), what it passes to
// ggml_rope_ext as attn_factor: with YaRN, get_mscale(factor, m) / get_mscale(factor, m_all)
// (1 exactly) when a yarn_log_multiplier is given, else get_mscale(factor, 1), then divided by
// 1 + 0.1 ln factor (ggml multiplies that back); times rope_attn_factor. Float, in its order.
float YarnAttnFactor(const ModelConfig& c) {
  float attn_factor = 1.0f;  // llama.cpp's hparams.yarn_attn_factor, not read from these files
  if (c.yarn_ext_factor != 0.0f) {
    const auto get_mscale = [](float scale, float mscale) {
      return scale <= 1.0f ? 1.0f : (0.1f * mscale * std::log(scale) + 1.0f);
    };
    const float factor = 1.0f / c.rope_freq_scale;
    if (c.yarn_log_multiplier != 0.0f) {
      const float mscale_all_dims = c.yarn_log_multiplier;
      // llama.cpp's special case for deepseek2 (its DeepSeek-V2-Lite config).
      const float mscale =
          c.architecture == "deepseek2" && mscale_all_dims != 1.0f ? mscale_all_dims : 1.0f;
      attn_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dims);
    } else {
      attn_factor = get_mscale(factor, 1.0f);
    }
    attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
  }
  return attn_factor * c.rope_attn_factor;
}

// The multi-head latent attention fields of `c` (part of Validate).
absl::Status ValidateLatentAttention(const ModelConfig& c) {
  constexpr int kMaxRank = 1 << 16;
  if (!c.mla()) {
    if (c.kv_lora_rank < 0 || c.q_lora_rank != 0 ||
        (c.v_head_dim != 0 && c.v_head_dim != c.head_dim)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model config: without latent attention (kv_lora_rank 0) q_lora_rank must be 0 and "
          "v_head_dim 0 or head_dim, got kv_lora_rank ",
          c.kv_lora_rank, ", q_lora_rank ", c.q_lora_rank, ", v_head_dim ", c.v_head_dim));
    }
    return absl::OkStatus();
  }
  if (c.kv_lora_rank > kMaxRank || c.q_lora_rank < 0 || c.q_lora_rank > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: kv_lora_rank ", c.kv_lora_rank, " and q_lora_rank ",
                     c.q_lora_rank, " must be in [1, ", kMaxRank, "] and [0, ", kMaxRank, "]"));
  }
  if (c.rope_dim >= c.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("model config: latent attention needs rope_dim ",
                                                   c.rope_dim, " below head_dim ", c.head_dim,
                                                   " (at least one dimension without RoPE)"));
  }
  if (c.n_kv_heads != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: latent attention has one shared KV head, got n_kv_heads ", c.n_kv_heads));
  }
  if (c.v_head_dim <= 0 || static_cast<int64_t>(c.n_heads) * c.v_head_dim > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("model config: v_head_dim ", c.v_head_dim,
                                                   " must be positive and n_heads * v_head_dim "
                                                   "at most ",
                                                   kMaxRank));
  }
  return absl::OkStatus();
}

// The mixture-of-experts fields of `c` (part of Validate; dimensions already capped).
absl::Status ValidateExperts(const ModelConfig& c) {
  // llama.cpp's LLAMA_MAX_EXPERTS.
  constexpr int kMaxExperts = 512;
  constexpr int64_t kMaxFfn = 4 << 16;  // Validate's cap of ffn_dim
  if (c.n_experts < 0 || c.n_experts > kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("model config: n_experts must be in [0, ",
                                                   kMaxExperts, "], got ", c.n_experts));
  }
  if (c.n_experts > 0 ? (c.n_experts_used < 1 || c.n_experts_used > c.n_experts)
                      : c.n_experts_used != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model config: n_experts_used ",
                                                   c.n_experts_used, " must be in [1, n_experts ",
                                                   c.n_experts, "] (0 without experts)"));
  }
  if (!c.moe()) {
    if (c.n_dense_layers != 0 || c.dense_ffn_dim != 0 || c.n_shared_experts != 0 ||
        c.expert_probs_bias || c.n_expert_groups != 0 || c.n_expert_groups_used != 0) {
      return absl::InvalidArgumentError(
          "model config: without experts n_dense_layers, dense_ffn_dim, n_shared_experts, "
          "expert_probs_bias and the expert groups must be 0");
    }
    return absl::OkStatus();
  }
  if (c.n_dense_layers < 0 || c.n_dense_layers >= c.n_layers ||
      (c.n_dense_layers > 0) != (c.dense_ffn_dim > 0) || c.dense_ffn_dim > kMaxFfn) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: n_dense_layers ", c.n_dense_layers, " must be in [0, n_layers ", c.n_layers,
        "), and dense_ffn_dim ", c.dense_ffn_dim, " in [1, ", kMaxFfn, "] exactly when it is > 0"));
  }
  if (c.n_shared_experts < 0 || c.n_shared_experts > kMaxExperts ||
      int64_t{c.n_shared_experts} * c.ffn_dim > kMaxFfn) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: n_shared_experts ", c.n_shared_experts, " must be in [0, ",
                     kMaxExperts, "] with n_shared_experts * ffn_dim at most ", kMaxFfn));
  }
  if (c.expert_gating != ExpertGating::kSoftmax && c.expert_gating != ExpertGating::kSigmoid) {
    return absl::InvalidArgumentError("model config: expert_gating must be softmax or sigmoid");
  }
  if (!(c.expert_weights_scale > 0.0f) || !std::isfinite(c.expert_weights_scale)) {
    return absl::InvalidArgumentError(
        "model config: expert_weights_scale must be a positive finite number");
  }
  if (c.n_expert_groups > 1) {
    // As llama.cpp asserts, and a group's score needs two experts.
    const int per_group = c.n_experts / c.n_expert_groups;
    if (c.n_expert_groups >= c.n_experts || c.n_experts % c.n_expert_groups != 0 || per_group < 2 ||
        c.n_expert_groups_used < 1 || c.n_expert_groups_used >= c.n_expert_groups ||
        c.n_experts_used > c.n_expert_groups_used * per_group) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model config: n_expert_groups ", c.n_expert_groups, " must divide n_experts ",
          c.n_experts, " into groups of at least 2, and n_expert_groups_used ",
          c.n_expert_groups_used, " be in [1, n_expert_groups) with room for n_experts_used ",
          c.n_experts_used));
    }
  } else if (c.n_expert_groups < 0 || c.n_expert_groups_used != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: n_expert_groups ", c.n_expert_groups, " must be >= 0 and ",
                     "n_expert_groups_used 0 without groups, got ", c.n_expert_groups_used));
  }
  return absl::OkStatus();
}

}  // namespace

bool ModelConfig::PlainExpertRouting() const {
  const ModelConfig plain;
  return n_dense_layers == plain.n_dense_layers && dense_ffn_dim == plain.dense_ffn_dim &&
         n_shared_experts == plain.n_shared_experts && expert_gating == plain.expert_gating &&
         expert_probs_bias == plain.expert_probs_bias && n_expert_groups == plain.n_expert_groups &&
         n_expert_groups_used == plain.n_expert_groups_used &&
         expert_weights_norm == plain.expert_weights_norm &&
         expert_weights_scale == plain.expert_weights_scale;
}

absl::Status ModelConfig::Validate() const {
  for (auto [name, v] : {std::pair<const char*, int>{"dim", dim},
                         {"n_layers", n_layers},
                         {"n_heads", n_heads},
                         {"n_kv_heads", n_kv_heads},
                         {"head_dim", head_dim},
                         {"ffn_dim", ffn_dim},
                         {"vocab_size", vocab_size},
                         {"context_length", context_length},
                         {"rope_dim", rope_dim}}) {
    if (absl::Status s = Positive(name, v); !s.ok()) return s;
  }
  if (n_heads % n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model config: n_heads (", n_heads,
                                                   ") is not a multiple of n_kv_heads (",
                                                   n_kv_heads, ")"));
  }
  if (rope_dim > head_dim || rope_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: rope_dim ", rope_dim, " must be even and at most head_dim ", head_dim));
  }
  // Caps that keep every size computation far from overflow; real models are far below.
  constexpr int kMaxDim = 1 << 16, kMaxLayers = 1024, kMaxVocab = 1 << 22, kMaxContext = 1 << 22;
  if (dim > kMaxDim || ffn_dim > 4 * kMaxDim || head_dim > kMaxDim || n_heads > kMaxDim ||
      n_layers > kMaxLayers || vocab_size > kMaxVocab || context_length > kMaxContext) {
    return absl::InvalidArgumentError("model config: a dimension exceeds the supported maximum");
  }
  // head_dim may be set apart from dim / n_heads (GGUF attention.key_length): keep q_dim() in
  // range.
  if (static_cast<int64_t>(n_heads) * head_dim > kMaxDim) {
    return absl::InvalidArgumentError(
        "model config: n_heads * head_dim exceeds the supported maximum");
  }
  if (!(rms_eps > 0.0f) || !std::isfinite(rms_eps)) {
    return absl::InvalidArgumentError("model config: rms_eps must be a positive finite number");
  }
  if (!(rope_base > 0.0f) || !std::isfinite(rope_base)) {
    return absl::InvalidArgumentError("model config: rope_base must be a positive finite number");
  }
  if (!(rope_freq_scale > 0.0f) || !std::isfinite(rope_freq_scale)) {
    return absl::InvalidArgumentError(
        "model config: rope_freq_scale must be a positive finite number");
  }
  if (!rope_freq_factors.empty()) {
    if (rope_freq_factors.size() != static_cast<size_t>(rope_dim / 2)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: rope_freq_factors has ", rope_freq_factors.size(),
                       " entries, expected rope_dim / 2 = ", rope_dim / 2));
    }
    for (float f : rope_freq_factors) {
      if (!(f > 0.0f) || !std::isfinite(f)) {
        return absl::InvalidArgumentError(
            "model config: rope_freq_factors must be positive finite numbers");
      }
    }
  }
  if (absl::Status s = ValidateExperts(*this); !s.ok()) return s;
  if (absl::Status s = ValidateRopeScaling(*this); !s.ok()) return s;
  if (absl::Status s = ValidateLatentAttention(*this); !s.ok()) return s;
  if (sliding_window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: sliding_window must be >= 0 (0 = none), got ", sliding_window));
  }
  return absl::OkStatus();
}

float ModelConfig::RopeMagnitude() const {
  float mscale = YarnAttnFactor(*this);
  // ggml's rope_yarn: "magnitude scaling corrected for interpolation".
  if (yarn_ext_factor != 0.0f) mscale *= 1.0f + 0.1f * std::log(1.0f / rope_freq_scale);
  return mscale;
}

float ModelConfig::AttentionScale() const {
  if (architecture != "deepseek2") return 1.0f / std::sqrt(static_cast<float>(head_dim));
  // llama.cpp's deepseek2 graph: cancel the division YarnAttnFactor made, then pre-scale
  // kq_scale by the square of YaRN's mscale with the log multiplier.
  const float log_inv_scale = std::log(1.0f / rope_freq_scale);
  const float attn_factor_org = YarnAttnFactor(*this) * (1.0f + 0.1f * log_inv_scale);
  const float mscale = attn_factor_org * (1.0f + 0.1f * yarn_log_multiplier * log_inv_scale);
  return 1.0f * mscale * mscale / std::sqrt(static_cast<float>(head_dim));
}

}  // namespace kvserve::model
