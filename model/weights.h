// Pointers to every weight tensor of a llama model, one per tensor, with shapes.
#ifndef KVSERVE_MODEL_WEIGHTS_H_
#define KVSERVE_MODEL_WEIGHTS_H_

#include <vector>

#include "model/tensor.h"

namespace kvserve::model {

struct LayerWeights {
  TensorView attn_norm;  // [1, dim]             RMSNorm gain before attention (F32)
  TensorView wq;         // [n_heads*head_dim, dim]
  TensorView wk;         // [n_kv_heads*head_dim, dim]
  TensorView wv;         // [n_kv_heads*head_dim, dim]
  TensorView wo;         // [dim, n_heads*head_dim]
  TensorView ffn_norm;   // [1, dim]             RMSNorm gain before the FFN (F32)
  // The dense FFN; empty views when ModelConfig::moe().
  TensorView w_gate;  // [ffn_dim, dim]       SwiGLU gate (w1)
  TensorView w_up;    // [ffn_dim, dim]       SwiGLU up (w3)
  TensorView w_down;  // [dim, ffn_dim]       SwiGLU down (w2)
  // The mixture-of-experts FFN (ModelConfig::moe(); empty otherwise): the router and one
  // view per expert, each expert's matrix a slice of the GGUF 3-D tensor
  // [n_experts][rows][cols] (ffn_{gate,up,down}_exps), so every matrix kernel takes it.
  TensorView router;                    // [n_experts, dim]  ffn_gate_inp: one logit per expert
  std::vector<TensorView> expert_gate;  // n_experts x [ffn_dim, dim]
  std::vector<TensorView> expert_up;    // n_experts x [ffn_dim, dim]
  std::vector<TensorView> expert_down;  // n_experts x [dim, ffn_dim]
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
