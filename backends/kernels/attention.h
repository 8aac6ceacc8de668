// Causal attention of one query row over a sequence's cached K/V, with grouped KV heads
// (GQA/MQA: query head h reads KV head h / (n_heads / n_kv_heads)), over a window of
// positions [first_pos, n_pos): first_pos is 0 for full attention and
// ModelConfig::FirstVisiblePosition for local (sliding-window) attention. This is the
// textbook masked attention: a position outside the window gets weight exactly 0 (as if
// its score were -inf), so it is never read and its block may be gone.
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

// scores[t] = scale * q_head · K[first_pos + t][kv_head]   for t in [0, scores.size())
// q_head: [head_dim]; K rows come from `kv` at `layer` (keys after RoPE).
// Precondition: first_pos + scores.size() <= kv.capacity_tokens() and those positions
// were written.
void AttentionScores(const SequenceKv& kv, int layer, int kv_head, int head_dim, float scale,
                     int first_pos, std::span<const float> q_head, std::span<float> scores);

// out[i] = sum_t weights[t] * V[first_pos + t][kv_head][i]  for t in [0, weights.size())
// out: [head_dim] (overwritten).
void WeightedValues(const SequenceKv& kv, int layer, int kv_head, int first_pos,
                    std::span<const float> weights, std::span<float> out);

// One query head over positions [first_pos, first_pos + att.size()): att = softmax(scores),
// out = att · V. q_head, out: [head_dim]; att: [n_visible] scratch that holds the softmax
// weights on return.
void AttendOneHead(const AttentionShape& shape, const SequenceKv& kv, int layer, int head,
                   int first_pos, std::span<const float> q_head, std::span<float> att,
                   std::span<float> out);

// Every query head of one query row at position n_pos - 1, attending to positions
// [first_pos, n_pos) (causal: its own and earlier ones inside the window; K/V of all of
// them must already be in `kv`). q, out: [n_heads * head_dim]; att: [n_heads, n_pos -
// first_pos] scratch, holding each head's softmax weights on return.
// Precondition: 0 <= first_pos < n_pos, sizes as stated.
void AttendOneQuery(const AttentionShape& shape, const SequenceKv& kv, int layer, int first_pos,
                    int n_pos, std::span<const float> q, std::span<float> att,
                    std::span<float> out);

}  // namespace kvserve::backends::kernels

#endif  // KVSERVE_BACKENDS_KERNELS_ATTENTION_H_
