// Pointers to every weight tensor of a llama model, one per tensor, with shapes.
#ifndef KVSERVE_MODEL_WEIGHTS_H_
#define KVSERVE_MODEL_WEIGHTS_H_

#include <vector>

#include "model/tensor.h"

namespace kvserve::model {

struct LayerWeights {
  TensorView attn_norm;  // [1, dim]             RMSNorm gain before attention (F32)
  TensorView wq;         // [n_heads*head_dim, dim]  (MLA: empty when q_lora_rank > 0)
  TensorView wk;         // [n_kv_heads*head_dim, dim]  (empty with MLA)
  TensorView wv;         // [n_kv_heads*head_dim, dim]  (empty with MLA)
  TensorView wo;         // [dim, n_heads*value_head_dim]
  // Multi-head latent attention (ModelConfig::mla(); empty views otherwise), llama.cpp's
  // deepseek2 tensors. r = kv_lora_rank, nope = head_dim - rope_dim.
  TensorView wq_a;       // [q_lora_rank, dim]          attn_q_a (when q_lora_rank > 0)
  TensorView q_a_norm;   // [1, q_lora_rank]            attn_q_a_norm (F32)
  TensorView wq_b;       // [n_heads*head_dim, q_lora_rank]  attn_q_b
  TensorView wkv_a;      // [r + rope_dim, dim]         attn_kv_a_mqa: latent, then k_pe
  TensorView kv_a_norm;  // [1, r]                      attn_kv_a_norm (F32)
  TensorView wk_b;       // [n_heads*r, nope]  attn_k_b: head h's rows [h*r, (h+1)*r) map
                         //   its q_nope into the latent (k_nope = W_h^T c)
  TensorView wv_b;       // [n_heads*v_head_dim, r]     attn_v_b: head h's value = W_h c
  TensorView ffn_norm;   // [1, dim]             RMSNorm gain before the FFN (F32)
  // The dense FFN, f = ModelConfig::DenseFfnDim(); empty views in a layer with experts
  // (ModelConfig::LayerHasExperts).
  TensorView w_gate;  // [f, dim]             SwiGLU gate (w1)
  TensorView w_up;    // [f, dim]             SwiGLU up (w3)
  TensorView w_down;  // [dim, f]             SwiGLU down (w2)
  // The mixture-of-experts FFN (ModelConfig::LayerHasExperts; empty otherwise): the router
  // and one view per expert, each expert's matrix a slice of the GGUF 3-D tensor
  // [n_experts][rows][cols] (ffn_{gate,up,down}_exps), so every matrix kernel takes it.
  TensorView router;                    // [n_experts, dim]  ffn_gate_inp: one logit per expert
  std::vector<TensorView> expert_gate;  // n_experts x [ffn_dim, dim]
  std::vector<TensorView> expert_up;    // n_experts x [ffn_dim, dim]
  std::vector<TensorView> expert_down;  // n_experts x [dim, ffn_dim]
  // exp_probs_b (F32), when ModelConfig::expert_probs_bias: added to the router's
  // probabilities to select the experts, not to their weights.
  TensorView expert_probs_bias;  // [1, n_experts]
  // The shared experts (ModelConfig::n_shared_experts > 0), one SwiGLU of
  // s = ModelConfig::shared_ffn_dim() hidden units: ffn_{gate,up,down}_shexp.
  TensorView shared_gate;  // [s, dim]
  TensorView shared_up;    // [s, dim]
  TensorView shared_down;  // [dim, s]
  // Present only when the config says so (ModelConfig::attention_qkv_bias,
  // attention_output_bias, qk_norm); empty views otherwise. All F32.
  TensorView bq;      // [1, n_heads*head_dim]    added to Q
  TensorView bk;      // [1, n_kv_heads*head_dim] added to K
  TensorView bv;      // [1, n_kv_heads*head_dim] added to V
  TensorView bo;      // [1, dim]                 added to the output projection
  TensorView q_norm;  // [1, head_dim]            RMSNorm gain of every Q head
  TensorView k_norm;  // [1, head_dim]            RMSNorm gain of every K head
};

struct ModelWeights {
  TensorView token_embedding;  // [vocab, dim]
  std::vector<LayerWeights> layers;
  TensorView output_norm;  // [1, dim] (F32)
  TensorView output;       // [vocab, dim]; same view as token_embedding when tied
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_WEIGHTS_H_
