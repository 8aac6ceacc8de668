// Causal attention of one query row over a sequence's cached K/V, with grouped KV heads
// (GQA/MQA: query head h reads KV head h / (n_heads / n_kv_heads)).
#ifndef KVSERVE_BACKENDS_KERNELS_ATTENTION_H_
#define KVSERVE_BACKENDS_KERNELS_ATTENTION_H_

#include <span>

#include "backends/kernels/kv_rows.h"

namespace kvserve::backends::kernels {

struct AttentionShape {
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads; n_heads % n_kv_heads == 0
  int head_dim = 0;
  float scale = 0.0f;  // multiplies q·k; a transformer uses 1 / sqrt(head_dim)

  // The KV head a query head reads.
  int KvHeadOf(int head) const { return head / (n_heads / n_kv_heads); }
};

// scores[t] = scale * q_head · K[t][kv_head]   for t in [0, scores.size())
// q_head: [head_dim]; K rows come from `kv` at `layer` (keys after RoPE).
// Precondition: scores.size() <= kv.capacity_tokens() and positions were written.
void AttentionScores(const SequenceKv& kv, int layer, int kv_head, int head_dim, float scale,
                     std::span<const float> q_head, std::span<float> scores);

// out[i] = sum_t weights[t] * V[t][kv_head][i]  for t in [0, weights.size())
// out: [head_dim] (overwritten).
void WeightedValues(const SequenceKv& kv, int layer, int kv_head, std::span<const float> weights,
                    std::span<float> out);

// One query head over positions [0, att.size()): att = softmax(scores), out = att · V.
// q_head, out: [head_dim]; att: [n_pos] scratch that holds the softmax weights on return.
void AttendOneHead(const AttentionShape& shape, const SequenceKv& kv, int layer, int head,
                   std::span<const float> q_head, std::span<float> att, std::span<float> out);

// Every query head of one query row at position n_pos - 1, attending to positions
// [0, n_pos) (causal: its own and all earlier ones; K/V of all of them must already be in
// `kv`). q, out: [n_heads * head_dim]; att: [n_heads, n_pos] scratch, holding each
// head's softmax weights on return. Precondition: n_pos >= 1, sizes as stated.
void AttendOneQuery(const AttentionShape& shape, const SequenceKv& kv, int layer, int n_pos,
                    std::span<const float> q, std::span<float> att, std::span<float> out);

}  // namespace kvserve::backends::kernels

#endif  // KVSERVE_BACKENDS_KERNELS_ATTENTION_H_
