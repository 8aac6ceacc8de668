#include "backends/kernels/mla.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "backends/kernels/attention.h"
#include "backends/kernels/matvec.h"
#include "backends/kernels/ops.h"

namespace kvserve::backends::kernels {
namespace {

// The rows [first, first + n) of `w` as floats, into `out` (resized to n * w.cols).
void RowsToFloat(const model::TensorView& w, int64_t first, int64_t n, std::vector<float>& out) {
  const auto cols = static_cast<size_t>(w.cols);
  out.resize(static_cast<size_t>(n) * cols);
  for (int64_t i = 0; i < n; ++i) {
    RowToFloat(w, first + i, std::span<float>(out).subspan(static_cast<size_t>(i) * cols, cols));
  }
}

// The widths of latent attention as sizes, and its score scale (llama.cpp's kq_scale,
// ModelConfig::AttentionScale()).
struct LatentDims {
  explicit LatentDims(const model::ModelConfig& c)
      : r(static_cast<size_t>(c.kv_lora_rank)),
        rope_dim(static_cast<size_t>(c.rope_dim)),
        head(static_cast<size_t>(c.head_dim)),
        nope(head - rope_dim),
        v_dim(static_cast<size_t>(c.v_head_dim)),
        scale(c.AttentionScale()) {}
  size_t r, rope_dim, head, nope, v_dim;
  float scale;
};

}  // namespace

model::TensorView HeadRows(const model::TensorView& w, int head, int rows_per_head) {
  return model::TensorView{w.type, w.row(int64_t{head} * rows_per_head), rows_per_head, w.cols};
}

void LatentQuery(const model::ModelConfig& c, const model::LayerWeights& L, const Rope& rope,
                 int pos, std::span<const float> x, std::span<float> q_a, std::span<float> q) {
  if (c.q_lora_rank > 0) {
    MatVec(L.wq_a, x, q_a);
    RmsNorm(q_a, F32Values(L.q_a_norm), c.rms_eps, q_a);
    MatVec(L.wq_b, q_a, q);
  } else {
    MatVec(L.wq, x, q);
  }
  RotateQueryHeads(c, rope, pos, q);
}

void RotateQueryHeads(const model::ModelConfig& c, const Rope& rope, int pos, std::span<float> q) {
  const auto head = static_cast<size_t>(c.head_dim), nope = head - c.rope_dim;
  for (int h = 0; h < c.n_heads; ++h) {
    rope.Apply(q.subspan(static_cast<size_t>(h) * head + nope, static_cast<size_t>(c.rope_dim)),
               pos);
  }
}

void LatentRow(const model::ModelConfig& c, const model::LayerWeights& L, const Rope& rope, int pos,
               std::span<const float> x, std::span<float> row) {
  MatVec(L.wkv_a, x, row);
  FinishLatentRow(c, L, rope, pos, row);
}

void FinishLatentRow(const model::ModelConfig& c, const model::LayerWeights& L, const Rope& rope,
                     int pos, std::span<float> row) {
  const auto r = static_cast<size_t>(c.kv_lora_rank);
  RmsNorm(row.first(r), F32Values(L.kv_a_norm), c.rms_eps, row.first(r));
  rope.Apply(row.subspan(r), pos);
}

void AttendLatentDecompressed(const model::ModelConfig& c, const model::LayerWeights& L,
                              const SequenceKv& kv, int layer, int first_pos, int n_pos,
                              std::span<const float> q, LatentScratch& s, std::span<float> out) {
  const LatentDims d(c);
  const size_t r = d.r, rope_dim = d.rope_dim, head = d.head, nope = d.nope, v_dim = d.v_dim;
  const size_t n_visible = static_cast<size_t>(n_pos - first_pos);
  const float scale = d.scale;
  s.row.resize(r + rope_dim);
  s.k_nope.resize(nope);
  s.v.resize(v_dim);
  s.att.resize(n_visible);
  for (int h = 0; h < c.n_heads; ++h) {
    RowsToFloat(L.wk_b, static_cast<int64_t>(h) * c.kv_lora_rank, c.kv_lora_rank, s.w_kb);
    RowsToFloat(L.wv_b, static_cast<int64_t>(h) * c.v_head_dim, c.v_head_dim, s.w_vb);
    const std::span<const float> q_h = q.subspan(static_cast<size_t>(h) * head, head);
    // Scores: q_nope · (W_kb^T c) + q_pe · k_pe.
    for (size_t t = 0; t < n_visible; ++t) {
      kv.Read(layer, KvKind::kKey, first_pos + static_cast<int64_t>(t), s.row);
      std::fill(s.k_nope.begin(), s.k_nope.end(), 0.0f);
      for (size_t i = 0; i < r; ++i) {
        AddScaled(s.k_nope, s.row[i], std::span<const float>(s.w_kb).subspan(i * nope, nope));
      }
      s.att[t] = scale * (Dot(q_h.first(nope), s.k_nope) +
                          Dot(q_h.subspan(nope), std::span<const float>(s.row).subspan(r)));
    }
    Softmax(s.att);
    // Values: sum_t att[t] * W_vb c(t).
    const std::span<float> out_h = out.subspan(static_cast<size_t>(h) * v_dim, v_dim);
    std::fill(out_h.begin(), out_h.end(), 0.0f);
    for (size_t t = 0; t < n_visible; ++t) {
      kv.Read(layer, KvKind::kKey, first_pos + static_cast<int64_t>(t), s.row);
      for (size_t j = 0; j < v_dim; ++j) {
        s.v[j] = Dot(std::span<const float>(s.w_vb).subspan(j * r, r),
                     std::span<const float>(s.row).first(r));
      }
      AddScaled(out_h, s.att[t], s.v);
    }
  }
}

void AttendLatentAbsorbed(const model::ModelConfig& c, const model::LayerWeights& L,
                          const SequenceKv& kv, int layer, int first_pos, int n_pos,
                          std::span<const float> q, LatentScratch& s, std::span<float> out) {
  const LatentDims d(c);
  const size_t r = d.r, rope_dim = d.rope_dim, head = d.head, nope = d.nope, v_dim = d.v_dim;
  const float scale = d.scale;
  s.q_lat.resize(r + rope_dim);
  s.o_lat.resize(r);
  s.att.resize(static_cast<size_t>(n_pos - first_pos));
  for (int h = 0; h < c.n_heads; ++h) {
    const std::span<const float> q_h = q.subspan(static_cast<size_t>(h) * head, head);
    // The query in the latent space, then its RoPE part unchanged.
    MatVec(HeadRows(L.wk_b, h, c.kv_lora_rank), q_h.first(nope),
           std::span<float>(s.q_lat).first(r));
    std::copy(q_h.begin() + static_cast<std::ptrdiff_t>(nope), q_h.end(),
              s.q_lat.begin() + static_cast<std::ptrdiff_t>(r));
    // One head of width r + rope_dim over the cached rows.
    AttentionScores(kv, layer, /*kv_head=*/0, static_cast<int>(r + rope_dim), scale, first_pos,
                    s.q_lat, s.att);
    Softmax(s.att);
    std::fill(s.o_lat.begin(), s.o_lat.end(), 0.0f);
    for (size_t t = 0; t < s.att.size(); ++t) {
      kv.AxpySlice(layer, KvKind::kKey, first_pos + static_cast<int64_t>(t), 0, s.att[t], s.o_lat);
    }
    // Back from the latent space to the head's values.
    MatVec(HeadRows(L.wv_b, h, c.v_head_dim), s.o_lat,
           out.subspan(static_cast<size_t>(h) * v_dim, v_dim));
  }
}

}  // namespace kvserve::backends::kernels
