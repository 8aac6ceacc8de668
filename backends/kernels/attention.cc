#include "backends/kernels/attention.h"

#include <algorithm>
#include <cstddef>

#include "backends/kernels/ops.h"

namespace kvserve::backends::kernels {

void AttentionScores(const SequenceKv& kv, int layer, int kv_head, int head_dim, float scale,
                     int first_pos, std::span<const float> q_head, std::span<float> scores) {
  for (size_t t = 0; t < scores.size(); ++t) {
    scores[t] = scale * kv.DotSlice(layer, KvKind::kKey, first_pos + static_cast<int64_t>(t),
                                    kv_head * head_dim, q_head);
  }
}

void WeightedValues(const SequenceKv& kv, int layer, int kv_head, int first_pos,
                    std::span<const float> weights, std::span<float> out) {
  std::fill(out.begin(), out.end(), 0.0f);
  const int offset = kv_head * static_cast<int>(out.size());
  for (size_t t = 0; t < weights.size(); ++t) {
    kv.AxpySlice(layer, KvKind::kValue, first_pos + static_cast<int64_t>(t), offset, weights[t],
                 out);
  }
}

void AttendOneHead(const AttentionShape& shape, const SequenceKv& kv, int layer, int head,
                   int first_pos, std::span<const float> q_head, std::span<float> att,
                   std::span<float> out) {
  const int kv_head = shape.KvHeadOf(head);
  AttentionScores(kv, layer, kv_head, shape.head_dim, shape.scale, first_pos, q_head, att);
  Softmax(att);
  WeightedValues(kv, layer, kv_head, first_pos, att, out);
}

void AttendOneQuery(const AttentionShape& shape, const SequenceKv& kv, int layer, int first_pos,
                    int n_pos, std::span<const float> q, std::span<float> att,
                    std::span<float> out) {
  const size_t hd = static_cast<size_t>(shape.head_dim);
  const size_t nv = static_cast<size_t>(n_pos - first_pos);
  for (int h = 0; h < shape.n_heads; ++h) {
    AttendOneHead(shape, kv, layer, h, first_pos, q.subspan(h * hd, hd), att.subspan(h * nv, nv),
                  out.subspan(h * hd, hd));
  }
}

}  // namespace kvserve::backends::kernels
