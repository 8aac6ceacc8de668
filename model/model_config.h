// The shape of a decoder-only llama-style transformer, independent of file format.
#ifndef KVSERVE_MODEL_MODEL_CONFIG_H_
#define KVSERVE_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kvserve::model {

// How RoPE pairs the dimensions of a head.
enum class RopeStyle : uint8_t {
  kAdjacentPairs,  // (x[2i], x[2i+1]) rotate together: GGUF llama, llama2.c.
  kRotateHalves,   // (x[i], x[i + rope_dim/2]) rotate together: NeoX / qwen2 style.
};

// How a mixture-of-experts router turns its logits into probabilities (GGUF
// expert_gating_func, llama.cpp's llama_expert_gating_func_type values).
enum class ExpertGating : uint8_t {
  kSoftmax = 1,  // p = softmax(logits) over all experts
  kSigmoid = 2,  // p_e = 1 / (1 + exp(-logit_e)), each expert alone
};

// The architectures kvserve runs (general.architecture of a GGUF file). They share one
// forward pass and differ only in the features below:
//   llama  adjacent-pair RoPE; optional Q/K/V and output biases; Llama 3.x RoPE factors
//   qwen2  rotate-halves RoPE; Q/K/V biases
//   qwen3  rotate-halves RoPE; per-head RMSNorm of Q and K before RoPE
//   qwen3moe  as qwen3, with a mixture-of-experts FFN in every layer (n_experts below)
//   deepseek2  multi-head latent attention (kv_lora_rank below), adjacent-pair RoPE on the
//              last rope_dim dimensions of each query head and on one shared key part;
//              mixture-of-experts layers after the first n_dense_layers, with shared
//              experts, the gating, bias and group limits below
struct ModelConfig {
  std::string architecture = "llama";
  int dim = 0;  // hidden size (embedding length)
  int n_layers = 0;
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads; n_heads % n_kv_heads == 0 (GQA/MQA)
  int head_dim = 0;    // usually dim / n_heads
  int ffn_dim = 0;     // SwiGLU hidden size (of each expert when n_experts > 0)
  int vocab_size = 0;
  int context_length = 0;  // maximum positions the model was trained for
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  int rope_dim = 0;  // dimensions of each head that RoPE rotates (<= head_dim, even)
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  // Linear RoPE scaling (GGUF rope.scaling.factor f, scaling.type "linear"): every angle is
  // multiplied by rope_freq_scale = 1 / f. Default 1 (no scaling).
  float rope_freq_scale = 1.0f;
  // Per-pair RoPE frequency divisors (GGUF tensor rope_freqs, written for Llama 3.x's
  // "llama3" rope scaling): angle i is divided by rope_freq_factors[i]. Empty = all 1;
  // otherwise [rope_dim / 2], every entry positive and finite.
  std::vector<float> rope_freq_factors;
  // YaRN RoPE scaling (GGUF rope.scaling.type "yarn"), as llama.cpp applies it (its context
  // parameters yarn_*, ggml's rope_yarn): on when yarn_ext_factor > 0 (llama.cpp sets 1 for
  // "yarn", 0 otherwise). rope_freq_scale is then 1 / rope.scaling.factor, and pair i's
  // angle mixes the interpolated angle (times rope_freq_scale) with the unscaled one:
  //   theta_i = theta_unscaled_i * (rope_freq_scale * (1 - m_i) + m_i),
  //   m_i = yarn_ext_factor * ramp_i, ramp_i = 1 - clamp((i - low) / max(0.001, high - low), 0, 1)
  // where [low, high] are the pairs whose wavelength spans yarn_beta_fast to yarn_beta_slow
  // turns over the original context (backends/kernels/rope.h). Cos and sin are multiplied by
  // RopeMagnitude(); deepseek2 also scales q·k (AttentionScale()).
  // llama.cpp reads no yarn_ext_factor / yarn_beta_* / yarn_attn_factor keys for these
  // architectures, so neither does kvserve: these are its defaults.
  float yarn_ext_factor = 0.0f;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  // rope.scaling.original_context_length: the context the model was trained with before
  // scaling. 0 = context_length (llama.cpp's fallback).
  int yarn_orig_context_length = 0;
  // deepseek2's rope.scaling.yarn_log_multiplier divided by 0.1 (the converter writes 0.1 *
  // mscale_all_dim; llama.cpp cancels the 0.1). 0 = absent. Other architectures: 0.
  float yarn_log_multiplier = 0.0f;
  // rope.scaling.attn_factor (default 1): multiplies cos and sin with or without YaRN.
  float rope_attn_factor = 1.0f;
  bool tied_embeddings = false;        // LM head is the token embedding table
  bool attention_qkv_bias = false;     // Q, K and V projections add a bias (qwen2)
  bool attention_output_bias = false;  // the attention output projection adds a bias
  bool qk_norm = false;                // RMSNorm of every Q and K head before RoPE (qwen3)
  // Local attention (GGUF attention.sliding_window): when > 0, the token at position p
  // attends to positions [max(0, p - sliding_window + 1), p] only, so at most the last
  // sliding_window positions (itself included). 0 = full causal attention.
  int sliding_window = 0;
  // Mixture of experts: when n_experts > 0 the FFN of every layer from n_dense_layers on
  // is a router over n_experts SwiGLU experts of ffn_dim hidden units (llama.cpp's
  // build_moe_ffn). Per token, from the router's logits:
  //   p = softmax(logits) over all experts, or sigmoid(logit) per expert (expert_gating)
  //   s = p + the layer's exp_probs_b (when expert_probs_bias; else s = p), for the
  //       selection only
  //   with n_expert_groups > 1: the experts are n_expert_groups groups of consecutive ids,
  //       a group's score the sum of its two largest s; the experts outside the
  //       n_expert_groups_used best groups (lowest index first on ties) are not selected
  //   the n_experts_used largest s are selected (lowest index first on ties), weight p
  //   weights divided by their sum (at least 6.103515625e-5) when expert_weights_norm,
  //       then multiplied by expert_weights_scale
  // and the FFN output is the sum of the selected experts' outputs times those weights,
  // plus (n_shared_experts > 0) one SwiGLU of shared_ffn_dim() hidden units run on every
  // token (the shared experts, ffn_{gate,up,down}_shexp). The defaults are qwen3moe's
  // rule (softmax, normalized, no bias, groups, shared experts or dense layers).
  // 0 = a dense FFN in every layer (n_experts_used and the fields below must then be at
  // their defaults).
  int n_experts = 0;
  int n_experts_used = 0;  // experts per token, in [1, n_experts] when n_experts > 0
  // Layers [0, n_dense_layers) have a dense FFN of dense_ffn_dim hidden units instead
  // (deepseek2's leading_dense_block_count); dense_ffn_dim > 0 exactly when
  // n_dense_layers > 0, and n_dense_layers < n_layers.
  int n_dense_layers = 0;
  int dense_ffn_dim = 0;
  int n_shared_experts = 0;  // 0 = none
  ExpertGating expert_gating = ExpertGating::kSoftmax;
  bool expert_probs_bias = false;  // every MoE layer has exp_probs_b [n_experts] (f32)
  int n_expert_groups = 0;         // 0 or 1 = no group limit
  int n_expert_groups_used = 0;    // in [1, n_expert_groups) when n_expert_groups > 1
  bool expert_weights_norm = true;
  float expert_weights_scale = 1.0f;  // positive, finite
  // Multi-head latent attention (deepseek2; DeepSeek-V2 section 2.1), when kv_lora_rank > 0.
  // Each query head is head_dim = qk_nope + rope_dim wide: its first qk_nope dimensions
  // meet k_nope = W_kb^T c, its last rope_dim (RoPE'd) the key part k_pe shared by every
  // head, where per token c = RMSNorm(kv_a(x)[0, kv_lora_rank)) * kv_a_norm (the latent)
  // and k_pe = RoPE(kv_a(x)[kv_lora_rank, kv_lora_rank + rope_dim)). Values are
  // v = W_vb c (v_head_dim per head). The KV cache holds c ‖ k_pe, one row per token and
  // layer (kv_dim() wide, one plane: kv_planes() == 1); n_kv_heads is then 1.
  // Queries come from q_b(RMSNorm(q_a(x)) * q_a_norm) when q_lora_rank > 0, else attn_q.
  int kv_lora_rank = 0;  // 0 = ordinary attention
  int q_lora_rank = 0;   // 0 = a plain query projection (also without MLA)
  int v_head_dim = 0;    // value width of a head; 0 = head_dim (must be 0 without MLA)

  bool moe() const { return n_experts > 0; }
  // Whether layer l's FFN is the mixture of experts (else a dense SwiGLU of
  // DenseFfnDim() hidden units).
  bool LayerHasExperts(int l) const { return moe() && l >= n_dense_layers; }
  int DenseFfnDim() const { return moe() ? dense_ffn_dim : ffn_dim; }
  // Whether every expert field after n_experts_used is at its default: qwen3moe's rule
  // (false: one of deepseek2's features is used).
  bool PlainExpertRouting() const;
  int shared_ffn_dim() const { return n_shared_experts * ffn_dim; }
  // The widest SwiGLU hidden layer of any FFN (dense, expert or shared).
  int max_ffn_dim() const {
    const int a = ffn_dim > dense_ffn_dim ? ffn_dim : dense_ffn_dim;
    return a > shared_ffn_dim() ? a : shared_ffn_dim();
  }
  bool mla() const { return kv_lora_rank > 0; }
  int q_dim() const { return n_heads * head_dim; }
  int value_head_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  // Width of the attention output that attn_output projects: n_heads * value_head_dim().
  int attn_out_dim() const { return n_heads * value_head_dim(); }
  // Width of one cached row: K (and V) of every KV head, or with MLA the latent c ‖ k_pe.
  int kv_dim() const { return mla() ? kv_lora_rank + rope_dim : n_kv_heads * head_dim; }
  // Rows a cached token has per layer: 2 (K and V), or 1 with MLA (the latent).
  int kv_planes() const { return mla() ? 1 : 2; }
  // The first position a token at `pos` attends to (0 without a sliding window).
  int FirstVisiblePosition(int pos) const {
    return sliding_window > 0 && pos >= sliding_window ? pos - sliding_window + 1 : 0;
  }
  // The original context of YaRN's correction range: yarn_orig_context_length, else
  // context_length.
  int YarnOrigContextLength() const {
    return yarn_orig_context_length > 0 ? yarn_orig_context_length : context_length;
  }
  // What RoPE multiplies every cos and sin by (ggml's mscale, from llama.cpp's
  // yarn_attn_factor): rope_attn_factor without YaRN; with it, for factor = 1 /
  // rope_freq_scale > 1, about rope_attn_factor * (1 + 0.1 ln factor), or rope_attn_factor
  // for deepseek2 with a yarn_log_multiplier. Computed in float in llama.cpp's order.
  float RopeMagnitude() const;
  // What q·k is multiplied by before the softmax: 1 / sqrt(head_dim), and for deepseek2
  // (llama.cpp's kq_scale) mscale^2 / sqrt(head_dim) with mscale = a * (1 + 0.1 *
  // yarn_log_multiplier * ln factor), a = llama.cpp's yarn_attn_factor * (1 + 0.1 ln factor).
  float AttentionScale() const;

  // OK when every field is positive and consistent; otherwise INVALID_ARGUMENT
  // naming the offending field. Readers call this before building weights.
  absl::Status Validate() const;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_MODEL_CONFIG_H_
