// What every backend does to one token's freshly projected Q, K and V before they meet
// the KV cache, in llama.cpp's order: biases, per-head Q/K RMSNorm, RoPE. One function so
// that the reference and cpu_blas backends cannot drift apart.
#ifndef KVSERVE_BACKENDS_KERNELS_QKV_H_
#define KVSERVE_BACKENDS_KERNELS_QKV_H_

#include <span>

#include "backends/kernels/rope.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace kvserve::backends::kernels {

// For a token at absolute position `pos`, with q = Wq x, k = Wk x, v = Wv x:
//   if config.attention_qkv_bias:  q += bq, k += bk, v += bv
//   if config.qk_norm:             every head of q (and of k) = RMSNorm(head) * q_norm (k_norm)
//   q, k = RoPE(q, pos), RoPE(k, pos)
// q: [n_heads * head_dim], k and v: [n_kv_heads * head_dim], all in place.
// Precondition: `layer` holds the tensors the config asks for (Model::FromParts checks).
// Pure: may run concurrently on disjoint rows.
void PrepareQkv(const model::ModelConfig& config, const model::LayerWeights& layer,
                const Rope& rope, int pos, std::span<float> q, std::span<float> k,
                std::span<float> v);

// The same with RoPE's angles at `pos` precomputed by rope.Angles(pos, cos, sin).
void PrepareQkv(const model::ModelConfig& config, const model::LayerWeights& layer,
                const Rope& rope, std::span<const float> cos, std::span<const float> sin,
                std::span<float> q, std::span<float> k, std::span<float> v);

// out += bo when config.attention_output_bias (out: [dim], the attention output
// projection of one token); nothing otherwise.
void AddOutputBias(const model::ModelConfig& config, const model::LayerWeights& layer,
                   std::span<float> out);

}  // namespace kvserve::backends::kernels

#endif  // KVSERVE_BACKENDS_KERNELS_QKV_H_
