#include "model/model_config.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

absl::Status Positive(const char* name, int v) {
  if (v > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model config: ", name, " must be positive, got ", v));
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

}  // namespace

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
  // llama.cpp's LLAMA_MAX_EXPERTS.
  constexpr int kMaxExperts = 512;
  if (n_experts < 0 || n_experts > kMaxExperts) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: n_experts must be in [0, ", kMaxExperts, "], got ", n_experts));
  }
  if (n_experts > 0 ? (n_experts_used < 1 || n_experts_used > n_experts) : n_experts_used != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model config: n_experts_used ", n_experts_used,
                                                   " must be in [1, n_experts ", n_experts,
                                                   "] (0 without experts)"));
  }
  if (absl::Status s = ValidateLatentAttention(*this); !s.ok()) return s;
  if (sliding_window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: sliding_window must be >= 0 (0 = none), got ", sliding_window));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::model
