// The forward pass over a stacked batch. Per layer: norm every row, project all rows at
// once (Q, K, V), rotate and append K/V of every row to its sequence's blocks, attend
// (each row over its own sequence's positions up to its own: causal), project O, add,
// norm, SwiGLU FFN over all rows, add. Only the last row of each sequence that wants
// logits goes through the final norm and the LM head, stacked into one product.
#include "backends/cpu_blas/cpu_blas_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/batch_check.h"
#include "backends/cpu_blas/attention.h"
#include "backends/cpu_blas/step_plan.h"
#include "backends/cpu_blas/thread_pool.h"
#include "backends/kernels/kv_rows.h"
#include "backends/kernels/matvec.h"
#include "backends/kernels/ops.h"
#include "backends/kernels/rope.h"

namespace kvserve::backends {

using cpu_blas::Isa;
using kernels::KvKind;

namespace {

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
        attention(config, layout, kernels, &pool) {}

  const model::ModelConfig& config;
  const model::ModelWeights& weights;
  const model::KvLayout layout;
  const kernels::Rope rope;
  const Isa isa;
  const cpu_blas::KernelSet* kernels;
  cpu_blas::ThreadPool pool;
  cpu_blas::Gemm gemm;
  cpu_blas::PagedAttention attention;

  cpu_blas::StepPlan plan;  // of the current step, rebuilt by every Forward

  // Activations; n = plan.rows.size(). Grown as needed, never shrunk.
  std::vector<float> x;        // [n, dim] residual stream
  std::vector<float> xb;       // [n, dim] normalised input of a sub-layer
  std::vector<float> xb2;      // [n, dim] sub-layer output before the residual add
  std::vector<float> q;        // [n, q_dim] queries (after RoPE)
  std::vector<float> k;        // [n, kv_dim] keys (after RoPE)
  std::vector<float> v;        // [n, kv_dim] values
  std::vector<float> att_out;  // [n, q_dim] attention output, heads concatenated
  std::vector<float> hb;       // [n, ffn_dim] gate, then silu(gate) * up
  std::vector<float> hb2;      // [n, ffn_dim] up
  std::vector<float> xf;       // [n_logits, dim] final hidden states of logit rows
  std::vector<float> out;      // [n_logits, vocab] logits before scattering

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
    st.attention.Run(batch, st.plan, l, st.q.data(), st.att_out.data());

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
