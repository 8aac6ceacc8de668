// Multi-head latent attention (deepseek2; ModelConfig::mla()) for one token, in the
// simplest correct form: the pieces a backend needs to compute a token's query and the
// latent row it caches, and attention over cached latents with K and V decompressed per
// position (the oracle; a fast backend attends in the absorbed form instead).
//
// Notation (model/weights.h): r = kv_lora_rank, nope = head_dim - rope_dim, each query
// head is [q_nope (nope) ‖ q_pe (rope_dim)], each cached row is [c (r) ‖ k_pe (rope_dim)].
//
// Threading: every function is pure and may run concurrently on disjoint outputs.
#ifndef KVSERVE_BACKENDS_KERNELS_MLA_H_
#define KVSERVE_BACKENDS_KERNELS_MLA_H_

#include <span>
#include <vector>

#include "backends/kernels/kv_rows.h"
#include "backends/kernels/rope.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace kvserve::backends::kernels {

// The query of a token whose attention input (after the attention RMSNorm) is `x`, RoPE'd
// at `pos`:
//   q = q_b(RMSNorm(q_a x) * q_a_norm)   when q_lora_rank > 0 (q_a: [q_lora_rank] scratch)
//   q = wq x                             otherwise (q_a unused, may be empty)
//   then the last rope_dim dimensions of every head are rotated by `rope` (which must be
//   Rope::ForModel(c): one head of rope_dim).
// x: [dim], q: [n_heads * head_dim].
void LatentQuery(const model::ModelConfig& c, const model::LayerWeights& L, const Rope& rope,
                 int pos, std::span<const float> x, std::span<float> q_a, std::span<float> q);

// The row a token caches: row = kv_a x, then row[0, r) = RMSNorm(row[0, r)) * kv_a_norm
// and row[r, r + rope_dim) is rotated at `pos`. x: [dim], row: [r + rope_dim] = kv_dim().
void LatentRow(const model::ModelConfig& c, const model::LayerWeights& L, const Rope& rope, int pos,
               std::span<const float> x, std::span<float> row);

// The steps after the projections, for a backend that projects many rows at once:
// RotateQueryHeads rotates the last rope_dim dimensions of every head of q [n_heads *
// head_dim] at `pos` (LatentQuery's last step); FinishLatentRow turns row = kv_a x into the
// cached row (LatentRow's steps after the projection).
void RotateQueryHeads(const model::ModelConfig& c, const Rope& rope, int pos, std::span<float> q);
void FinishLatentRow(const model::ModelConfig& c, const model::LayerWeights& L, const Rope& rope,
                     int pos, std::span<float> row);

// Scratch for the attention functions below: grows as needed, reused across calls.
struct LatentScratch {
  std::vector<float> row;     // [r + rope_dim] one cached row
  std::vector<float> w_kb;    // [r, nope] head h's attn_k_b, as float
  std::vector<float> w_vb;    // [v_head_dim, r] head h's attn_v_b, as float
  std::vector<float> k_nope;  // [nope]
  std::vector<float> v;       // [v_head_dim]
  std::vector<float> att;     // [n_visible] one head's scores, then weights
  std::vector<float> q_lat;   // [r + rope_dim] one head's query in the latent space ‖ q_pe
  std::vector<float> o_lat;   // [r] one head's attention output in the latent space
};

// Head `head`'s rows of W_kb or W_vb (a 3-D tensor stored as [heads * rows_per_head,
// cols], row-major): rows [head * rows_per_head, (head + 1) * rows_per_head).
model::TensorView HeadRows(const model::TensorView& w, int head, int rows_per_head);

// Attention of query `q` (from LatentQuery) over the rows `kv` holds at `layer` for
// positions [first_pos, n_pos), each head h on its own decompressed keys and values:
//   k_h(t) = [W_kb_h^T c(t) ‖ k_pe(t)],  v_h(t) = W_vb_h c(t)
//   out_h  = sum_t softmax_t(scale * q_h · k_h(t)) v_h(t)
// scale = c.AttentionScale() (llama.cpp's kq_scale). out: [n_heads *
// v_head_dim]. Precondition: the rows of those positions were written (LatentRow).
void AttendLatentDecompressed(const model::ModelConfig& c, const model::LayerWeights& L,
                              const SequenceKv& kv, int layer, int first_pos, int n_pos,
                              std::span<const float> q, LatentScratch& scratch,
                              std::span<float> out);

// The same attention in the absorbed form (DeepSeek-V2 section 2.1.2): no key or value is
// decompressed. Per head h:
//   q_lat = [W_kb_h q_nope ‖ q_pe]                         (r + rope_dim)
//   att   = softmax_t(scale * q_lat · row(t))               one head of width r + rope_dim
//   out_h = W_vb_h (sum_t att[t] c(t))                       (v_head_dim)
// Equal to AttendLatentDecompressed up to float rounding (q_nope · W_kb^T c = (W_kb q_nope) ·
// c); the form a fast backend's decode uses, reading each cached row once per head.
void AttendLatentAbsorbed(const model::ModelConfig& c, const model::LayerWeights& L,
                          const SequenceKv& kv, int layer, int first_pos, int n_pos,
                          std::span<const float> q, LatentScratch& scratch, std::span<float> out);

}  // namespace kvserve::backends::kernels

#endif  // KVSERVE_BACKENDS_KERNELS_MLA_H_
