// The forward pass over a stacked batch. Per layer: norm every row, project all rows at
// once (Q, K, V), rotate and append K/V of every row to its sequence's blocks, attend
// (each row over its own sequence's positions up to its own: causal), project O, add,
// norm, SwiGLU FFN over all rows, add. Only the last row of each sequence that wants
// logits goes through the final norm and the LM head, stacked into one product.
#include "backends/cpu_blas/cpu_blas_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/batch_check.h"
#include "backends/cpu_blas/step_plan.h"
#include "backends/cpu_blas/thread_pool.h"
#include "backends/kernels/kv_rows.h"
#include "backends/kernels/matvec.h"
#include "backends/kernels/ops.h"
#include "backends/kernels/rope.h"

namespace kvserve::backends {

using cpu_blas::AttentionPath;
using cpu_blas::AttentionTask;
using cpu_blas::Isa;
using kernels::KvKind;

namespace {

// Per pool thread scratch of the attention kernels.
struct AttentionScratch {
  std::vector<float> scores;  // [heads, positions] weights of the task's heads (per-row path)
  std::vector<float> q;       // [rows * group, head_dim] stacked queries (sgemm path)
  std::vector<float> k;       // [positions, head_dim] keys of one KV head (sgemm path)
  std::vector<float> v;       // [positions, head_dim] values of one KV head (sgemm path)
  std::vector<float> s;       // [rows * group, positions] scores, then weights (sgemm path)
  std::vector<float> o;       // [rows * group, head_dim] outputs (sgemm path)
};

void Grow(std::vector<float>& v, size_t size) {
  if (v.size() < size) v.resize(size);
}
// Elementwise work (norms, RoPE, SwiGLU) below this many elements stays on the caller.
constexpr int64_t kMinParallelElements = 32 * 1024;

}  // namespace

struct CpuBlasBackend::State {
  State(const model::Model& m, const model::KvLayout& l, int n_threads, Isa level,
        const cpu_blas::GemmOptions& gemm_options)
      : config(m.config()),
        weights(m.weights()),
        layout(l),
        rope(kernels::Rope::ForModel(m.config())),
        isa(level),
        kernels(&cpu_blas::KernelsFor(level)),
        pool(n_threads),
        gemm(&pool, kernels, gemm_options),
        scratch(static_cast<size_t>(n_threads)) {}

  const model::ModelConfig& config;
  const model::ModelWeights& weights;
  const model::KvLayout layout;
  const kernels::Rope rope;
  const Isa isa;
  const cpu_blas::KernelSet* kernels;
  cpu_blas::ThreadPool pool;
  cpu_blas::Gemm gemm;

  cpu_blas::StepPlan plan;  // of the current step, rebuilt by every Forward

  // Activations; n = plan.rows.size(). Grown as needed, never shrunk.
  std::vector<float> x;                   // [n, dim] residual stream
  std::vector<float> xb;                  // [n, dim] normalised input of a sub-layer
  std::vector<float> xb2;                 // [n, dim] sub-layer output before the residual add
  std::vector<float> q;                   // [n, q_dim] queries (after RoPE)
  std::vector<float> k;                   // [n, kv_dim] keys (after RoPE)
  std::vector<float> v;                   // [n, kv_dim] values
  std::vector<float> att_out;             // [n, q_dim] attention output, heads concatenated
  std::vector<float> hb;                  // [n, ffn_dim] gate, then silu(gate) * up
  std::vector<float> hb2;                 // [n, ffn_dim] up
  std::vector<float> xf;                  // [n_logits, dim] final hidden states of logit rows
  std::vector<float> out;                 // [n_logits, vocab] logits before scattering
  std::vector<AttentionScratch> scratch;  // per pool thread

  // Calls fn(row_begin, row_end) over [0, n) in chunks on the pool, or once on the
  // caller when the work (n * elements_per_row) is small.
  template <typename Fn>
  void ForRows(int n, int64_t elements_per_row, Fn&& fn) {
    if (static_cast<int64_t>(n) * elements_per_row < kMinParallelElements || n == 1) {
      fn(0, n);
      return;
    }
    const int chunks = std::min(n, pool.size() * 4);
    const int per_chunk = (n + chunks - 1) / chunks;
    pool.Run((n + per_chunk - 1) / per_chunk, [&](int64_t task, int /*thread*/) {
      const int begin = static_cast<int>(task) * per_chunk;
      fn(begin, std::min(n, begin + per_chunk));
    });
  }

  void Attention(const Batch& batch, int layer);
  void AttendRows(const Batch& batch, const AttentionTask& task, int layer,
                  std::vector<float>& att);
  void AttendRowsSgemm(const Batch& batch, const AttentionTask& task, int layer,
                       AttentionScratch& scratch);
  void AttendTask(const Batch& batch, const AttentionTask& task, int layer,
                  AttentionScratch& scratch);
  // out[t, 0:head_dim) = K or V of `kv_head` at position t, as f32, for t in [0, n_pos).
  void GatherHead(const kernels::SequenceKv& kv, int layer, KvKind kind, int kv_head, int n_pos,
                  float* out) const;
};

absl::StatusOr<std::unique_ptr<CpuBlasBackend>> CpuBlasBackend::Create(
    const model::Model& model, const model::KvLayout& kv_layout, const CpuBlasOptions& options) {
  if (absl::Status s = ValidateKvLayout(model.config(), kv_layout); !s.ok()) return s;
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_blas: threads must be >= 0, got ", options.threads));
  }
  const Isa level = options.isa.value_or(cpu_blas::BestIsa());
  if (!cpu_blas::IsaSupported(level)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cpu_blas: this CPU does not support ", std::string(cpu_blas::IsaName(level)), " kernels"));
  }
  int n_threads = options.threads;
  if (n_threads == 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  cpu_blas::SetOpenBlasSingleThreaded();
  return std::unique_ptr<CpuBlasBackend>(new CpuBlasBackend(
      std::make_unique<State>(model, kv_layout, n_threads, level, options.gemm)));
}

CpuBlasBackend::CpuBlasBackend(std::unique_ptr<State> state) : state_(std::move(state)) {}
CpuBlasBackend::~CpuBlasBackend() = default;

const model::KvLayout& CpuBlasBackend::kv_layout() const { return state_->layout; }
Isa CpuBlasBackend::isa() const { return state_->isa; }
int CpuBlasBackend::threads() const { return state_->pool.size(); }

void CpuBlasBackend::State::AttendRows(const Batch& batch, const AttentionTask& task, int layer,
                                       std::vector<float>& att) {
  const model::ModelConfig& c = config;
  const kernels::SequenceKv kv(layout, batch.sequences[task.seq].blocks);
  const int hd = c.head_dim;
  const int group = c.n_heads / c.n_kv_heads;
  const int q_dim = c.q_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool f16 = layout.dtype == model::DType::kF16;
  const size_t head_bytes = static_cast<size_t>(hd) * (f16 ? 2 : 4);
  const size_t row_bytes = layout.row_bytes();
  const int bt = layout.block_tokens;
  const cpu_blas::KernelSet& kr = *kernels;
  const auto dot_rows = f16 ? kr.dot_rows_f16 : kr.dot_rows_f32;
  const auto axpy_rows = f16 ? kr.axpy_rows_f16 : kr.axpy_rows_f32;
  // The task's query heads: [h_begin, h_begin + n_heads), adjacent within a row, and their
  // KV heads adjacent within a cached row. Blocks are the outer loop and heads the inner
  // one, so each pass reads one contiguous slice of every cached row (all the task's
  // heads) instead of one head's 64 floats per row across the whole context.
  const int h_begin = task.kv_head * group;
  const int n_heads = task.kv_heads * group;

  for (int j = task.row_begin; j < task.row_end; ++j) {
    const int n_pos = plan.rows[j].pos + 1;  // causal: positions [0, pos]
    const size_t un_pos = static_cast<size_t>(n_pos);
    Grow(att, static_cast<size_t>(n_heads) * un_pos);  // [n_heads, n_pos]
    const float* qj = q.data() + static_cast<size_t>(j) * q_dim;
    float* oj = att_out.data() + static_cast<size_t>(j) * q_dim;

    // scores[h][t] = scale * q_h · K[t][kv_head(h)]
    for (int t0 = 0; t0 < n_pos; t0 += bt) {
      const uint8_t* plane = kv.Row(layer, KvKind::kKey, t0);
      const int count = std::min(n_pos, t0 + bt) - t0;
      for (int i = 0; i < n_heads; ++i) {
        const int h = h_begin + i;
        dot_rows(qj + static_cast<size_t>(h) * hd,
                 plane + static_cast<size_t>(h / group) * head_bytes, row_bytes, count, hd, scale,
                 att.data() + static_cast<size_t>(i) * un_pos + t0);
      }
    }
    for (int i = 0; i < n_heads; ++i) {
      kernels::Softmax(std::span<float>(att.data() + static_cast<size_t>(i) * un_pos, un_pos));
    }
    // out_h = sum_t att[h][t] * V[t][kv_head(h)]
    std::fill(oj + static_cast<size_t>(h_begin) * hd,
              oj + static_cast<size_t>(h_begin + n_heads) * hd, 0.0f);
    for (int t0 = 0; t0 < n_pos; t0 += bt) {
      const uint8_t* plane = kv.Row(layer, KvKind::kValue, t0);
      const int count = std::min(n_pos, t0 + bt) - t0;
      for (int i = 0; i < n_heads; ++i) {
        const int h = h_begin + i;
        axpy_rows(att.data() + static_cast<size_t>(i) * un_pos + t0,
                  plane + static_cast<size_t>(h / group) * head_bytes, row_bytes, count, hd,
                  oj + static_cast<size_t>(h) * hd);
      }
    }
  }
}

void CpuBlasBackend::State::GatherHead(const kernels::SequenceKv& kv, int layer, KvKind kind,
                                       int kv_head, int n_pos, float* out) const {
  const int hd = config.head_dim;
  const bool f16 = layout.dtype == model::DType::kF16;
  const size_t head_offset_bytes =
      static_cast<size_t>(kv_head) * static_cast<size_t>(hd) * (f16 ? 2 : 4);
  const size_t row_bytes = layout.row_bytes();
  const int bt = layout.block_tokens;
  for (int t0 = 0; t0 < n_pos; t0 += bt) {
    const uint8_t* plane = kv.Row(layer, kind, t0) + head_offset_bytes;
    const int t1 = std::min(n_pos, t0 + bt);
    for (int t = t0; t < t1; ++t) {
      const uint8_t* src = plane + static_cast<size_t>(t - t0) * row_bytes;
      float* dst = out + static_cast<size_t>(t) * hd;
      if (f16) {
        kernels->f16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, hd);
      } else {
        std::memcpy(dst, src, static_cast<size_t>(hd) * sizeof(float));
      }
    }
  }
}

// All rows of the task belong to one sequence at consecutive positions, so the last row
// sees the most positions (n_ctx); every row r sees [0, pos_r]. With the query heads of
// the KV head stacked as rows (row i = query row j, head g: i = (j - row_begin) * group + g):
//   S = scale * Q · K[0:n_ctx]^T,  causal mask and softmax per row,  O = S · V[0:n_ctx].
void CpuBlasBackend::State::AttendRowsSgemm(const Batch& batch, const AttentionTask& task,
                                            int layer, AttentionScratch& sc) {
  const model::ModelConfig& c = config;
  const kernels::SequenceKv kv(layout, batch.sequences[task.seq].blocks);
  const int hd = c.head_dim;
  const int group = c.n_heads / c.n_kv_heads;
  const size_t q_dim = static_cast<size_t>(c.q_dim());
  const size_t head_bytes = static_cast<size_t>(hd) * sizeof(float);
  const int m = (task.row_end - task.row_begin) * group;
  const int n_ctx = plan.rows[task.row_end - 1].pos + 1;
  const size_t um = static_cast<size_t>(m);
  const size_t un_ctx = static_cast<size_t>(n_ctx);
  const size_t uhd = static_cast<size_t>(hd);
  Grow(sc.q, um * uhd);
  Grow(sc.k, un_ctx * uhd);
  Grow(sc.v, un_ctx * uhd);
  Grow(sc.s, um * un_ctx);
  Grow(sc.o, um * uhd);

  // The group's query heads are adjacent within a row: copy each row's slice at once.
  const size_t first_head = static_cast<size_t>(task.kv_head) * group * uhd;
  for (int j = task.row_begin; j < task.row_end; ++j) {
    std::memcpy(sc.q.data() + static_cast<size_t>(j - task.row_begin) * group * uhd,
                q.data() + static_cast<size_t>(j) * q_dim + first_head, head_bytes * group);
  }
  GatherHead(kv, layer, KvKind::kKey, task.kv_head, n_ctx, sc.k.data());
  GatherHead(kv, layer, KvKind::kValue, task.kv_head, n_ctx, sc.v.data());

  // S[m, n_ctx] = scale * Q[m, hd] · K[n_ctx, hd]^T
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n_ctx, hd, scale, sc.q.data(), hd,
              sc.k.data(), hd, 0.0f, sc.s.data(), n_ctx);
  for (int i = 0; i < m; ++i) {
    const int n_pos = plan.rows[task.row_begin + i / group].pos + 1;
    float* s_row = sc.s.data() + static_cast<size_t>(i) * un_ctx;
    kernels::Softmax(std::span<float>(s_row, static_cast<size_t>(n_pos)));
    std::fill(s_row + n_pos, s_row + n_ctx, 0.0f);  // causal mask
  }
  // O[m, hd] = P[m, n_ctx] · V[n_ctx, hd]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, n_ctx, 1.0f, sc.s.data(), n_ctx,
              sc.v.data(), hd, 0.0f, sc.o.data(), hd);
  for (int j = task.row_begin; j < task.row_end; ++j) {
    std::memcpy(att_out.data() + static_cast<size_t>(j) * q_dim + first_head,
                sc.o.data() + static_cast<size_t>(j - task.row_begin) * group * uhd,
                head_bytes * group);
  }
}

void CpuBlasBackend::State::AttendTask(const Batch& batch, const AttentionTask& task, int layer,
                                       AttentionScratch& sc) {
  if (task.path == AttentionPath::kSgemm) {
    AttendRowsSgemm(batch, task, layer, sc);
  } else {
    AttendRows(batch, task, layer, sc.scores);
  }
}

void CpuBlasBackend::State::Attention(const Batch& batch, int layer) {
  // Small steps (tiny models, one decode row) run on the caller: waking the pool costs
  // more than the work.
  int64_t work = 0;
  for (const AttentionTask& t : plan.attention_tasks) {
    for (int j = t.row_begin; j < t.row_end; ++j) {
      work += int64_t{plan.rows[j].pos + 1} * t.kv_heads;
    }
  }
  work *= static_cast<int64_t>(config.head_dim) * (config.n_heads / config.n_kv_heads) * 2;
  if (work < kMinParallelElements) {
    for (const AttentionTask& t : plan.attention_tasks) AttendTask(batch, t, layer, scratch[0]);
    return;
  }
  pool.Run(static_cast<int64_t>(plan.attention_tasks.size()), [&](int64_t task, int thread) {
    AttendTask(batch, plan.attention_tasks[static_cast<size_t>(task)], layer,
               scratch[static_cast<size_t>(thread)]);
  });
}

absl::Status CpuBlasBackend::Forward(const Batch& batch, std::span<float> logits) {
  State& st = *state_;
  const model::ModelConfig& c = st.config;
  const model::ModelWeights& w = st.weights;
  // Check everything before writing anything, so a rejected batch leaves KV untouched.
  if (absl::Status s = ValidateBatch(c, st.layout, batch, logits.size()); !s.ok()) return s;
  const size_t kv_align = st.layout.dtype == model::DType::kF16 ? 2 : 4;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    for (uint8_t* block : batch.sequences[i].blocks) {
      if (reinterpret_cast<uintptr_t>(block) % kv_align != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", i, ": KV block is not aligned to ", kv_align, " bytes"));
      }
    }
  }

  // Stack the rows of every sequence; plan attention and the LM head.
  cpu_blas::PlanStep(batch, {.n_kv_heads = c.n_kv_heads, .threads = st.pool.size()}, st.plan);
  const std::vector<cpu_blas::StepRow>& rows = st.plan.rows;
  const int n = static_cast<int>(rows.size());
  if (n == 0) return absl::OkStatus();

  const size_t dim = static_cast<size_t>(c.dim);
  const size_t q_dim = static_cast<size_t>(c.q_dim());
  const size_t kv_dim = static_cast<size_t>(c.kv_dim());
  const size_t ffn = static_cast<size_t>(c.ffn_dim);
  const size_t un = static_cast<size_t>(n);
  Grow(st.x, un * dim);
  Grow(st.xb, un * dim);
  Grow(st.xb2, un * dim);
  Grow(st.q, un * q_dim);
  Grow(st.k, un * kv_dim);
  Grow(st.v, un * kv_dim);
  Grow(st.att_out, un * q_dim);
  Grow(st.hb, un * ffn);
  Grow(st.hb2, un * ffn);
  auto row = [](std::vector<float>& v, size_t width, int r) {
    return std::span<float>(v.data() + static_cast<size_t>(r) * width, width);
  };

  // Token embeddings.
  st.ForRows(n, c.dim, [&](int b, int e) {
    for (int r = b; r < e; ++r) {
      kernels::RowToFloat(w.token_embedding, rows[r].token, row(st.x, dim, r));
    }
  });

  for (int l = 0; l < c.n_layers; ++l) {
    const model::LayerWeights& L = w.layers[l];

    // Attention RMSNorm.
    st.ForRows(n, c.dim, [&](int b, int e) {
      for (int r = b; r < e; ++r) {
        kernels::RmsNorm(row(st.x, dim, r), kernels::F32Values(L.attn_norm), c.rms_eps,
                         row(st.xb, dim, r));
      }
    });

    // Q, K, V of all new rows.
    st.gemm.Run({{&L.wq, st.q.data()}, {&L.wk, st.k.data()}, {&L.wv, st.v.data()}}, st.xb.data(),
                n);

    // RoPE at each row's position; append K and V to its sequence's blocks.
    st.ForRows(n, c.q_dim() + 2 * c.kv_dim(), [&](int b, int e) {
      for (int r = b; r < e; ++r) {
        const int pos = rows[r].pos;
        st.rope.Apply(row(st.q, q_dim, r), pos);
        st.rope.Apply(row(st.k, kv_dim, r), pos);
        const kernels::SequenceKv kv(st.layout, batch.sequences[rows[r].seq].blocks);
        kv.Write(l, KvKind::kKey, pos, row(st.k, kv_dim, r));
        kv.Write(l, KvKind::kValue, pos, row(st.v, kv_dim, r));
      }
    });

    // Causal attention of every row over its own sequence.
    st.Attention(batch, l);

    // Output projection and residual.
    st.gemm.Run(L.wo, st.att_out.data(), n, st.xb2.data());
    st.ForRows(n, c.dim, [&](int b, int e) {
      for (int r = b; r < e; ++r) {
        kernels::AddInPlace(row(st.x, dim, r), row(st.xb2, dim, r));
        // FFN RMSNorm.
        kernels::RmsNorm(row(st.x, dim, r), kernels::F32Values(L.ffn_norm), c.rms_eps,
                         row(st.xb, dim, r));
      }
    });

    // SwiGLU FFN.
    st.gemm.Run({{&L.w_gate, st.hb.data()}, {&L.w_up, st.hb2.data()}}, st.xb.data(), n);
    st.ForRows(n, c.ffn_dim, [&](int b, int e) {
      for (int r = b; r < e; ++r) kernels::SwiGlu(row(st.hb, ffn, r), row(st.hb2, ffn, r));
    });
    st.gemm.Run(L.w_down, st.hb.data(), n, st.xb2.data());
    st.ForRows(n, c.dim, [&](int b, int e) {
      for (int r = b; r < e; ++r) kernels::AddInPlace(row(st.x, dim, r), row(st.xb2, dim, r));
    });
  }

  // Final RMSNorm and LM head over the last row of each sequence that wants logits.
  const std::vector<cpu_blas::LogitRow>& logit_rows = st.plan.logit_rows;
  const int n_logits = static_cast<int>(logit_rows.size());
  if (n_logits == 0) return absl::OkStatus();
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  Grow(st.xf, static_cast<size_t>(n_logits) * dim);
  Grow(st.out, static_cast<size_t>(n_logits) * vocab);
  for (int i = 0; i < n_logits; ++i) {
    kernels::RmsNorm(row(st.x, dim, logit_rows[i].row), kernels::F32Values(w.output_norm),
                     c.rms_eps, row(st.xf, dim, i));
  }
  st.gemm.Run(w.output, st.xf.data(), n_logits, st.out.data());
  for (int i = 0; i < n_logits; ++i) {
    std::memcpy(logits.data() + static_cast<size_t>(logit_rows[i].seq) * vocab,
                st.out.data() + static_cast<size_t>(i) * vocab, vocab * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::backends
