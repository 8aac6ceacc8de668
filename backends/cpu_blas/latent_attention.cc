#include "backends/cpu_blas/latent_attention.h"

#include <algorithm>
#include <cstring>

#include "backends/kernels/kv_rows.h"
#include "backends/kernels/mla.h"

namespace kvserve::backends::cpu_blas {
namespace {

// Heads per dot_rows / axpy_rows call (their pointers on the stack; the kernels take them
// a few at a time).
constexpr int kHeadsPerCall = 16;

}  // namespace

LatentAttention::LatentAttention(const model::ModelConfig& config, const model::KvLayout& layout,
                                 const KernelSet* kernels, ThreadPool* pool, Gemm* gemm)
    : config_(config),
      layout_(layout),
      kernels_(kernels),
      pool_(pool),
      gemm_(gemm),
      att_(static_cast<size_t>(pool->size())) {}

void LatentAttention::Run(const Batch& batch, const StepPlan& plan, const model::LayerWeights& L,
                          int layer, const float* q, float* att_out) {
  const model::ModelConfig& c = config_;
  const int n = static_cast<int>(plan.rows.size());
  if (n == 0) return;
  const int heads = c.n_heads;
  const size_t r = static_cast<size_t>(c.kv_lora_rank), rope = static_cast<size_t>(c.rope_dim);
  const size_t head = static_cast<size_t>(c.head_dim), nope = head - rope;
  const size_t v_dim = static_cast<size_t>(c.v_head_dim);
  const size_t hn = static_cast<size_t>(heads) * static_cast<size_t>(n);
  q_nope_.resize(hn * nope);
  absorbed_.resize(hn * r);
  q_lat_.resize(hn * (r + rope));
  o_lat_.resize(hn * r);
  v_out_.resize(hn * v_dim);
  // Head-major activations: head h's rows are rows [h * n, (h + 1) * n).
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < n; ++j) {
      const size_t i = static_cast<size_t>(h) * n + j;
      std::memcpy(q_nope_.data() + i * nope, q + static_cast<size_t>(j) * c.q_dim() + h * head,
                  nope * sizeof(float));
    }
  }
  // 1. q_lat = [W_kb_h q_nope ‖ q_pe].
  RunPerHead(L.wk_b, c.kv_lora_rank, q_nope_.data(), n, absorbed_.data());
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < n; ++j) {
      const size_t i = static_cast<size_t>(h) * n + j;
      float* dst = q_lat_.data() + i * (r + rope);
      std::memcpy(dst, absorbed_.data() + i * r, r * sizeof(float));
      std::memcpy(dst + r, q + static_cast<size_t>(j) * c.q_dim() + h * head + nope,
                  rope * sizeof(float));
    }
  }
  // 2. Attention in the latent space, a task per row and slice of heads (at
  // batch 1 the heads are what the threads share).
  const int slices = std::min(heads, std::max(1, pool_->size() / std::max(1, n)));
  const int per_slice = (heads + slices - 1) / slices;
  pool_->Run(int64_t{n} * slices, [&](int64_t task, int thread) {
    const int row = static_cast<int>(task / slices);
    const int h0 = static_cast<int>(task % slices) * per_slice;
    const int h1 = std::min(heads, h0 + per_slice);
    if (h0 < h1) Attend(batch, plan, layer, row, h0, h1, att_[static_cast<size_t>(thread)]);
  });
  // 3. att_out[row, h] = W_vb_h o_lat.
  RunPerHead(L.wv_b, c.v_head_dim, o_lat_.data(), n, v_out_.data());
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < n; ++j) {
      std::memcpy(att_out + static_cast<size_t>(j) * c.attn_out_dim() + h * v_dim,
                  v_out_.data() + (static_cast<size_t>(h) * n + j) * v_dim, v_dim * sizeof(float));
    }
  }
}

void LatentAttention::RunPerHead(const model::TensorView& w, int rows_per_head, const float* x,
                                 int n, float* y) {
  const int heads = config_.n_heads;
  views_.resize(static_cast<size_t>(heads));
  products_.clear();
  for (int h = 0; h < heads; ++h) {
    views_[h] = kernels::HeadRows(w, h, rows_per_head);
    products_.push_back({&views_[h],
                         y + static_cast<size_t>(h) * n * static_cast<size_t>(rows_per_head), h * n,
                         n});
  }
  gemm_->RunGroups(products_, x, heads * n);
}

void LatentAttention::Attend(const Batch& batch, const StepPlan& plan, int layer, int row, int h0,
                             int h1, std::vector<float>& att) {
  const model::ModelConfig& c = config_;
  const int n = static_cast<int>(plan.rows.size());
  const int r = c.kv_lora_rank, width = c.kv_lora_rank + c.rope_dim;
  const int pos = plan.rows[row].pos;
  const int first = c.FirstVisiblePosition(pos);
  const int n_pos = pos + 1;
  const size_t n_vis = static_cast<size_t>(n_pos - first);
  const bool f16 = layout_.dtype == model::DType::kF16;
  const auto dot_rows = f16 ? kernels_->dot_rows_f16 : kernels_->dot_rows_f32;
  const auto axpy_rows = f16 ? kernels_->axpy_rows_f16 : kernels_->axpy_rows_f32;
  const size_t row_bytes = layout_.row_bytes();
  const int bt = layout_.block_tokens;
  const float scale = c.AttentionScale();
  const kernels::SequenceKv kv(layout_, batch.sequences[plan.rows[row].seq].blocks);
  att.resize(static_cast<size_t>(h1 - h0) * n_vis);
  // The latent of head h of this row, and its output.
  const auto at = [&](std::vector<float>& m, int h, size_t w) {
    return m.data() + (static_cast<size_t>(h) * n + row) * w;
  };
  // Scores, one block's rows at a time for all the heads (every head reads the same
  // latent rows: kHeadsPerCall of them per kernel call).
  for (int t0 = first; t0 < n_pos;) {
    const int t1 = std::min(n_pos, (t0 / bt + 1) * bt);
    const uint8_t* rows = kv.Row(layer, kernels::KvKind::kKey, t0);
    for (int hb = h0; hb < h1; hb += kHeadsPerCall) {
      const int nh = std::min(kHeadsPerCall, h1 - hb);
      const float* q[kHeadsPerCall];
      float* out[kHeadsPerCall];
      for (int k = 0; k < nh; ++k) {
        q[k] = at(q_lat_, hb + k, static_cast<size_t>(width));
        out[k] = att.data() + static_cast<size_t>(hb + k - h0) * n_vis + (t0 - first);
      }
      dot_rows(q, out, nh, rows, row_bytes, t1 - t0, width, scale);
    }
    t0 = t1;
  }
  for (int h = h0; h < h1; ++h) {
    kernels_->softmax(att.data() + static_cast<size_t>(h - h0) * n_vis,
                      static_cast<int64_t>(n_vis));
    std::fill_n(at(o_lat_, h, static_cast<size_t>(r)), r, 0.0f);
  }
  // o_lat = sum_t att[t] c(t), the first r elements of each row.
  for (int t0 = first; t0 < n_pos;) {
    const int t1 = std::min(n_pos, (t0 / bt + 1) * bt);
    const uint8_t* rows = kv.Row(layer, kernels::KvKind::kKey, t0);
    for (int hb = h0; hb < h1; hb += kHeadsPerCall) {
      const int nh = std::min(kHeadsPerCall, h1 - hb);
      const float* a[kHeadsPerCall];
      float* y[kHeadsPerCall];
      for (int k = 0; k < nh; ++k) {
        a[k] = att.data() + static_cast<size_t>(hb + k - h0) * n_vis + (t0 - first);
        y[k] = at(o_lat_, hb + k, static_cast<size_t>(r));
      }
      axpy_rows(a, y, nh, rows, row_bytes, t1 - t0, r);
    }
    t0 = t1;
  }
}

}  // namespace kvserve::backends::cpu_blas
