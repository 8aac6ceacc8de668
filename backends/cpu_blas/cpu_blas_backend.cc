// The forward pass over a stacked batch. Per layer: norm every row, project all rows at
// once (Q, K, V), add biases, norm Q/K heads and rotate (per architecture), append K/V of
// every row to its sequence's blocks, attend (each row over its own sequence's positions
// up to its own: causal; only the last sliding_window ones: local), project O, add,
// norm, SwiGLU FFN over all rows (or, with experts, over each selected expert's rows),
// add. Only the last row of each sequence that wants
// logits goes through the final norm and the LM head, stacked into one product.
//
// Forward validates, plans the step (step_plan.h), grows the activation buffers, then
// runs the steps below; attention is attention.h's.
#include "backends/cpu_blas/cpu_blas_backend.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/batch_check.h"
#include "backends/cpu_blas/attention.h"
#include "backends/cpu_blas/latent_attention.h"
#include "backends/cpu_blas/moe_groups.h"
#include "backends/cpu_blas/packed_weights.h"
#include "backends/cpu_blas/step_plan.h"
#include "backends/cpu_blas/thread_pool.h"
#include "backends/kernels/kv_rows.h"
#include "backends/kernels/matvec.h"
#include "backends/kernels/mla.h"
#include "backends/kernels/moe.h"
#include "backends/kernels/ops.h"
#include "backends/kernels/qkv.h"
#include "backends/kernels/rope.h"
#include "model/panels.h"

namespace kvserve::backends {

using cpu_blas::Isa;
using kernels::KvKind;

namespace {

// Elementwise work (norms, RoPE, SwiGLU) below this many elements stays on the caller.
constexpr int64_t kMinParallelElements = 32 * 1024;

// OK when every KV block pointer of `batch` is aligned to the KV element of `layout`
// (f32: 4 bytes, f16: 2); otherwise INVALID_ARGUMENT naming the first bad sequence.
absl::Status CheckKvAlignment(const model::KvLayout& layout, const Batch& batch) {
  const size_t kv_align = layout.dtype == model::DType::kF16 ? 2 : 4;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    for (uint8_t* block : batch.sequences[i].blocks) {
      if (reinterpret_cast<uintptr_t>(block) % kv_align != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", i, ": KV block is not aligned to ", kv_align, " bytes"));
      }
    }
  }
  return absl::OkStatus();
}

// Row r of a row-major matrix of `width` columns.
std::span<float> Row(std::vector<float>& m, size_t width, int r) {
  return std::span<float>(m.data() + static_cast<size_t>(r) * width, width);
}

void Grow(std::vector<float>& v, size_t size) {
  if (v.size() < size) v.resize(size);
}

// The activations of one step, row-major; n = the step's stacked rows, n_logits = its
// logit rows. Grown as needed by Reserve, never shrunk (a step reuses the last one's).
struct Activations {
  std::vector<float> x;         // [n, dim] residual stream
  std::vector<float> xb;        // [n, dim] normalised input of a sub-layer
  std::vector<float> xb2;       // [n, dim] sub-layer output before the residual add
  std::vector<float> q;         // [n, q_dim] queries (after RoPE)
  std::vector<float> k;         // [n, kv_dim] keys (after RoPE)
  std::vector<float> v;         // [n, kv_dim] values
  std::vector<float> att_out;   // [n, attn_out_dim] attention output, heads concatenated
  std::vector<float> q_a;       // [n, q_lora_rank] latent attention's compressed query
  std::vector<float> hb;        // [n, f] gate, then silu(gate) * up (f: the FFN's width)
  std::vector<float> hb2;       // [n, f] up
  std::vector<float> xf;        // [n_logits, dim] final hidden states of logit rows
  std::vector<float> out;       // [n_logits, vocab] logits before scattering
  std::vector<float> rope_cos;  // [n, rope_dim / 2] RoPE's cos at row r's position
  std::vector<float> rope_sin;  // [n, rope_dim / 2] and sin
  // Mixture of experts only (empty otherwise); k = n_experts_used. An entry is one (row,
  // selected expert) pair; entries are grouped by expert (MoeGroups).
  std::vector<float> router;          // [n, n_experts] router logits, then probabilities
  std::vector<float> selection;       // [n_experts] kernels::RouteTopK's selection scores
  std::vector<float> shared_out;      // [n, dim] the shared experts' output
  std::vector<int32_t> expert_ids;    // [n, k] row r's experts, in selection order
  std::vector<float> expert_weights;  // [n, k] and their weights
  std::vector<float> expert_in;       // [n * k, dim] entry e's input row (xb of its row)
  std::vector<float> expert_hb;       // [n * k, ffn_dim] gate, then silu(gate) * up
  std::vector<float> expert_hb2;      // [n * k, ffn_dim] up
  std::vector<float> expert_out;      // [n * k, dim] the expert's output for the entry

  // Grows every buffer to at least the sizes above for `n` rows and `n_logits` logit rows.
  void Reserve(const model::ModelConfig& c, int n, int n_logits) {
    const size_t un = static_cast<size_t>(n);
    const size_t ul = static_cast<size_t>(n_logits);
    const size_t dim = static_cast<size_t>(c.dim);
    const size_t q_dim = static_cast<size_t>(c.q_dim());
    const size_t kv_dim = static_cast<size_t>(c.kv_dim());
    const size_t ffn = static_cast<size_t>(c.ffn_dim);
    Grow(x, un * dim);
    Grow(xb, un * dim);
    Grow(xb2, un * dim);
    Grow(q, un * q_dim);
    Grow(k, un * kv_dim);
    Grow(v, un * kv_dim);
    Grow(att_out, un * static_cast<size_t>(c.attn_out_dim()));
    Grow(q_a, un * static_cast<size_t>(c.q_lora_rank));
    Grow(hb, un * static_cast<size_t>(c.max_ffn_dim()));
    Grow(hb2, un * static_cast<size_t>(c.max_ffn_dim()));
    Grow(xf, ul * dim);
    Grow(out, ul * static_cast<size_t>(c.vocab_size));
    Grow(rope_cos, un * static_cast<size_t>(c.rope_dim / 2));
    Grow(rope_sin, un * static_cast<size_t>(c.rope_dim / 2));
    if (!c.moe()) return;
    const size_t entries = un * static_cast<size_t>(c.n_experts_used);
    Grow(router, un * static_cast<size_t>(c.n_experts));
    Grow(selection, static_cast<size_t>(c.n_experts));
    if (c.n_shared_experts > 0) Grow(shared_out, un * dim);
    Grow(expert_weights, entries);
    if (expert_ids.size() < entries) expert_ids.resize(entries);
    Grow(expert_in, entries * dim);
    Grow(expert_hb, entries * ffn);
    Grow(expert_hb2, entries * ffn);
    Grow(expert_out, entries * dim);
  }
};

}  // namespace

struct CpuBlasBackend::State {
  State(const model::Model& m, const model::KvLayout& l, int n_threads, Isa level,
        const cpu_blas::GemmOptions& gemm_options)
      : config(m.config()),
        layout(l),
        rope(kernels::Rope::ForModel(m.config())),
        isa(level),
        kernels(&cpu_blas::KernelsFor(level)),
        pool(n_threads),
        packed(m.weights(), cpu_blas::PanelsWanted(*kernels, gemm_options)),
        weights(packed.weights()),
        gemm_options(gemm_options),
        gemm(&pool, kernels, gemm_options),
        attention(config, layout, kernels, &pool),
        latent(config, layout, kernels, &pool, &gemm) {}

  const model::ModelConfig& config;
  const model::KvLayout layout;
  const kernels::Rope rope;
  const Isa isa;
  const cpu_blas::KernelSet* kernels;
  cpu_blas::ThreadPool pool;
  const cpu_blas::PackedWeights packed;
  const model::ModelWeights& weights;  // packed's
  const cpu_blas::GemmOptions gemm_options;
  cpu_blas::Gemm gemm;
  cpu_blas::PagedAttention attention;
  cpu_blas::LatentAttention latent;  // used with ModelConfig::mla()

  cpu_blas::StepPlan plan;  // of the current step, rebuilt by every Forward
  Activations act;          // sized for `plan` by Forward
  cpu_blas::MoeGroups moe;  // the rows of each expert, per mixture-of-experts layer
  // A mixture-of-experts layer's products of one kind (gate and up, or down), one or two
  // per selected expert over its rows.
  std::vector<cpu_blas::Gemm::RowsProduct> expert_products;

  // The steps of a forward pass, in order. Each reads and writes `act` for the rows of
  // `plan` (n of them); `batch` is the one `plan` was made from.

  // x[r] = embedding of row r's token; RoPE's angles at row r's position (computed once
  // per step, not per layer: at batch 1 the 32 sin / cos pairs per layer of a 64-dim
  // head were about 1 % of an s110m q4_0 step).
  void EmbedTokens();
  // xb[r] = RMSNorm(x[r]) with the layer's attention norm.
  void AttentionNorm(const model::LayerWeights& L);
  // q, k, v = xb · Wq^T, Wk^T, Wv^T for all rows at once.
  void ProjectQkv(const model::LayerWeights& L);
  // kernels::PrepareQkv (biases, Q/K norms, RoPE) on q[r], k[r], v[r] at row r's
  // position; k[r], v[r] written into the row's sequence's blocks at that position.
  void PrepareAndAppendKv(const Batch& batch, const model::LayerWeights& L, int layer);
  // Latent attention (ModelConfig::mla()) instead of the three steps above: q (through
  // q_a, its norm and q_b, or wq) and k = kv_a · xb for all rows at once; then per row
  // the RoPE of q's heads and kernels::FinishLatentRow of k, written into the row's
  // blocks; then the rows' attention in the absorbed form (cpu_blas::LatentAttention).
  void ProjectLatent(const model::LayerWeights& L);
  void PrepareAndAppendLatent(const Batch& batch, const model::LayerWeights& L, int layer);
  void AttendLatent(const Batch& batch, const model::LayerWeights& L, int layer);
  // x += att_out · Wo^T (+ bo), then xb = RMSNorm(x) with the layer's FFN norm.
  void OutputProjectionAndFfnNorm(const model::LayerWeights& L);
  // out[r] = down · (silu(gate · xb[r]) * (up · xb[r])) for every row, `width` hidden
  // units ([n, dim] at out).
  void SwiGluRows(const model::TensorView& gate, const model::TensorView& up,
                  const model::TensorView& down, int width, float* out);
  // x += W_down · (silu(W_gate · xb) * (W_up · xb)).
  void FeedForward(const model::LayerWeights& L);
  // The same with the experts each row's router selects (ModelConfig::n_experts), the
  // rows grouped by expert so that each selected expert's matrices are read once, plus
  // the shared experts (a SwiGLU on every row) when the model has them.
  void MixtureOfExperts(const model::LayerWeights& L);
  // For each logit row: final RMSNorm of x[row], LM head, into logits[seq * vocab, ...).
  void LmHead(std::span<float> logits);

  int rows() const { return static_cast<int>(plan.rows.size()); }

  // A K or V row into the cache at dst, as SequenceKv::Write stores it (f16 through the
  // kernel set's conversion).
  void WriteKvRow(std::span<const float> row, uint8_t* dst) const {
    if (layout.dtype == model::DType::kF16) {
      kernels->f32_to_f16(row.data(), reinterpret_cast<uint16_t*>(dst),
                          static_cast<int64_t>(row.size()));
    } else {
      std::memcpy(dst, row.data(), row.size() * sizeof(float));
    }
  }

  // out = RMSNorm(x) * gain (KernelSet::rms_norm; kernels::RmsNorm's contract).
  void Normalize(std::span<const float> x, const model::TensorView& gain,
                 std::span<float> out) const {
    kernels->rms_norm(x.data(), kernels::F32Values(gain).data(), static_cast<int64_t>(x.size()),
                      config.rms_eps, out.data());
  }

  // Calls fn(row_begin, row_end) over [0, n) in chunks on the pool, or once on the
  // caller when the work (n * elements_per_row) is small.
  template <typename Fn>
  void ForRows(int n, int64_t elements_per_row, Fn&& fn) {
    if (static_cast<int64_t>(n) * elements_per_row < kMinParallelElements || n == 1) {
      fn(0, n);
      return;
    }
    pool.RunRanges(n, fn);
  }
};

model::PanelTypes CpuBlasBackend::ReadsPanels(const CpuBlasOptions& options) {
  const Isa level = options.isa.value_or(cpu_blas::BestIsa());
  if (!cpu_blas::IsaSupported(level)) return {};
  return cpu_blas::PanelsWanted(cpu_blas::KernelsFor(level), options.gemm);
}

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
  const model::PanelTypes packed = model::PanelTypesOf(model.weights());
  const model::PanelTypes readable =
      cpu_blas::PanelsReadable(cpu_blas::KernelsFor(level), options.gemm);
  if (packed.f32 && !readable.f32) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cpu_blas: the model's f32 weights are packed in panels (LoadOptions::panels), which "
        "only the kernels of level avx2 and up read; kernel level ",
        std::string(cpu_blas::IsaName(level))));
  }
  if (packed.bf16 && !readable.bf16) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cpu_blas: the model's bf16 weights are packed in panels (LoadOptions::panels), "
        "which only the kernels of level avx2 and up read; kernel level ",
        std::string(cpu_blas::IsaName(level))));
  }
  for (const model::DType type :
       {model::DType::kQ4_0, model::DType::kQ8_0, model::DType::kQ4_K, model::DType::kQ6_K}) {
    if (packed.has(type) && !readable.has(type)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cpu_blas: the model's ", std::string(model::DTypeName(type)),
          " weights are packed in panels (LoadOptions::panels), which only the x86-64 vector "
          "levels (avx2 and up) read; kernel level ",
          std::string(cpu_blas::IsaName(level))));
    }
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

void CpuBlasBackend::State::EmbedTokens() {
  const size_t dim = static_cast<size_t>(config.dim);
  const size_t half = static_cast<size_t>(config.rope_dim / 2);
  ForRows(rows(), config.dim, [&](int b, int e) {
    for (int r = b; r < e; ++r) {
      kernels::RowToFloat(weights.token_embedding, plan.rows[r].token, Row(act.x, dim, r));
      rope.Angles(plan.rows[r].pos, Row(act.rope_cos, half, r), Row(act.rope_sin, half, r));
    }
  });
}

void CpuBlasBackend::State::AttentionNorm(const model::LayerWeights& L) {
  const size_t dim = static_cast<size_t>(config.dim);
  ForRows(rows(), config.dim, [&](int b, int e) {
    for (int r = b; r < e; ++r) {
      Normalize(Row(act.x, dim, r), L.attn_norm, Row(act.xb, dim, r));
    }
  });
}

void CpuBlasBackend::State::ProjectQkv(const model::LayerWeights& L) {
  gemm.Run({{&L.wq, act.q.data()}, {&L.wk, act.k.data()}, {&L.wv, act.v.data()}}, act.xb.data(),
           rows());
}

void CpuBlasBackend::State::PrepareAndAppendKv(const Batch& batch, const model::LayerWeights& L,
                                               int layer) {
  const size_t q_dim = static_cast<size_t>(config.q_dim());
  const size_t kv_dim = static_cast<size_t>(config.kv_dim());
  const size_t half = static_cast<size_t>(config.rope_dim / 2);
  ForRows(rows(), config.q_dim() + 2 * config.kv_dim(), [&](int b, int e) {
    for (int r = b; r < e; ++r) {
      const int pos = plan.rows[r].pos;
      kernels::PrepareQkv(config, L, rope, Row(act.rope_cos, half, r), Row(act.rope_sin, half, r),
                          Row(act.q, q_dim, r), Row(act.k, kv_dim, r), Row(act.v, kv_dim, r));
      const kernels::SequenceKv kv(layout, batch.sequences[plan.rows[r].seq].blocks);
      WriteKvRow(Row(act.k, kv_dim, r), kv.Row(layer, KvKind::kKey, pos));
      WriteKvRow(Row(act.v, kv_dim, r), kv.Row(layer, KvKind::kValue, pos));
    }
  });
}

void CpuBlasBackend::State::ProjectLatent(const model::LayerWeights& L) {
  if (config.q_lora_rank == 0) {
    gemm.Run({{&L.wq, act.q.data()}, {&L.wkv_a, act.k.data()}}, act.xb.data(), rows());
    return;
  }
  gemm.Run({{&L.wq_a, act.q_a.data()}, {&L.wkv_a, act.k.data()}}, act.xb.data(), rows());
  const size_t q_rank = static_cast<size_t>(config.q_lora_rank);
  ForRows(rows(), config.q_lora_rank, [&](int b, int e) {
    for (int r = b; r < e; ++r) {
      Normalize(Row(act.q_a, q_rank, r), L.q_a_norm, Row(act.q_a, q_rank, r));
    }
  });
  gemm.Run(L.wq_b, act.q_a.data(), rows(), act.q.data());
}

void CpuBlasBackend::State::PrepareAndAppendLatent(const Batch& batch, const model::LayerWeights& L,
                                                   int layer) {
  const size_t q_dim = static_cast<size_t>(config.q_dim());
  const size_t kv_dim = static_cast<size_t>(config.kv_dim());
  ForRows(rows(), config.q_dim() + config.kv_dim(), [&](int b, int e) {
    for (int r = b; r < e; ++r) {
      const int pos = plan.rows[r].pos;
      kernels::RotateQueryHeads(config, rope, pos, Row(act.q, q_dim, r));
      kernels::FinishLatentRow(config, L, rope, pos, Row(act.k, kv_dim, r));
      const kernels::SequenceKv kv(layout, batch.sequences[plan.rows[r].seq].blocks);
      WriteKvRow(Row(act.k, kv_dim, r), kv.Row(layer, KvKind::kKey, pos));
    }
  });
}

void CpuBlasBackend::State::AttendLatent(const Batch& batch, const model::LayerWeights& L,
                                         int layer) {
  latent.Run(batch, plan, L, layer, act.q.data(), act.att_out.data());
}

void CpuBlasBackend::State::OutputProjectionAndFfnNorm(const model::LayerWeights& L) {
  const size_t dim = static_cast<size_t>(config.dim);
  gemm.Run(L.wo, act.att_out.data(), rows(), act.xb2.data());
  ForRows(rows(), config.dim, [&](int b, int e) {
    for (int r = b; r < e; ++r) {
      kernels::AddOutputBias(config, L, Row(act.xb2, dim, r));
      kernels::AddInPlace(Row(act.x, dim, r), Row(act.xb2, dim, r));
      Normalize(Row(act.x, dim, r), L.ffn_norm, Row(act.xb, dim, r));
    }
  });
}

void CpuBlasBackend::State::SwiGluRows(const model::TensorView& gate, const model::TensorView& up,
                                       const model::TensorView& down, int width, float* out) {
  const size_t ffn = static_cast<size_t>(width);
  gemm.Run({{&gate, act.hb.data()}, {&up, act.hb2.data()}}, act.xb.data(), rows());
  ForRows(rows(), width, [&](int b, int e) {
    kernels->swiglu(act.hb.data() + b * ffn, act.hb2.data() + b * ffn,
                    static_cast<int64_t>(e - b) * width);
  });
  gemm.Run(down, act.hb.data(), rows(), out);
}

void CpuBlasBackend::State::FeedForward(const model::LayerWeights& L) {
  const size_t dim = static_cast<size_t>(config.dim);
  SwiGluRows(L.w_gate, L.w_up, L.w_down, config.DenseFfnDim(), act.xb2.data());
  ForRows(rows(), config.dim, [&](int b, int e) {
    for (int r = b; r < e; ++r) kernels::AddInPlace(Row(act.x, dim, r), Row(act.xb2, dim, r));
  });
}

void CpuBlasBackend::State::MixtureOfExperts(const model::LayerWeights& L) {
  const int n = rows();
  const int k = config.n_experts_used;
  const size_t dim = static_cast<size_t>(config.dim);
  const size_t ffn = static_cast<size_t>(config.ffn_dim);
  // Router logits of every row, then each row's experts and weights.
  gemm.Run(L.router, act.xb.data(), n, act.router.data());
  const size_t n_experts = static_cast<size_t>(config.n_experts);
  const kernels::ExpertRouting routing = kernels::ExpertRouting::ForModel(config);
  const std::span<const float> bias = L.expert_probs_bias.data != nullptr
                                          ? kernels::F32Values(L.expert_probs_bias)
                                          : std::span<const float>();
  for (int r = 0; r < n; ++r) {
    const size_t at = static_cast<size_t>(r) * k;
    kernels::RouteTopK(routing, bias, Row(act.router, n_experts, r),
                       std::span<float>(act.selection.data(), n_experts),
                       std::span<int32_t>(act.expert_ids.data() + at, static_cast<size_t>(k)),
                       std::span<float>(act.expert_weights.data() + at, static_cast<size_t>(k)));
  }
  // The shared experts on every row, before the routed products reuse the buffers.
  const bool shared = config.n_shared_experts > 0;
  if (shared) {
    SwiGluRows(L.shared_gate, L.shared_up, L.shared_down, config.shared_ffn_dim(),
               act.shared_out.data());
  }
  moe.Build(std::span<const int32_t>(act.expert_ids.data(), static_cast<size_t>(n) * k),
            config.n_experts);
  // Each entry's input row, in expert order.
  const int entries = n * k;
  ForRows(entries, config.dim, [&](int b, int e) {
    for (int i = b; i < e; ++i) {
      const std::span<float> row = Row(act.xb, dim, moe.entry_source[i] / k);
      std::copy(row.begin(), row.end(), Row(act.expert_in, dim, i).begin());
    }
  });
  // Every selected expert's SwiGLU over its rows (a block of consecutive entries): the
  // gate and up products of all experts in one parallel loop, then the down products in
  // another, so a layer costs two pool dispatches however many experts run.
  expert_products.clear();
  for (const cpu_blas::MoeGroups::Group& g : moe.groups) {
    const size_t e = static_cast<size_t>(g.expert);
    const int rows = g.end - g.begin;
    expert_products.push_back(
        {&L.expert_gate[e], act.expert_hb.data() + g.begin * ffn, g.begin, rows});
    expert_products.push_back(
        {&L.expert_up[e], act.expert_hb2.data() + g.begin * ffn, g.begin, rows});
  }
  gemm.RunGroups(expert_products, act.expert_in.data(), entries);
  ForRows(entries, config.ffn_dim, [&](int b, int e) {
    kernels->swiglu(act.expert_hb.data() + b * ffn, act.expert_hb2.data() + b * ffn,
                    static_cast<int64_t>(e - b) * config.ffn_dim);
  });
  expert_products.clear();
  for (const cpu_blas::MoeGroups::Group& g : moe.groups) {
    expert_products.push_back({&L.expert_down[static_cast<size_t>(g.expert)],
                               act.expert_out.data() + g.begin * dim, g.begin, g.end - g.begin});
  }
  gemm.RunGroups(expert_products, act.expert_hb.data(), entries);
  // x[r] += the weighted sum of its experts' outputs, in selection order as the reference
  // backend adds them (so a row's sum does not depend on its batch), plus the shared
  // experts' output.
  ForRows(n, config.dim * k, [&](int b, int e) {
    for (int r = b; r < e; ++r) {
      const std::span<float> sum = Row(act.xb2, dim, r);
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int j = 0; j < k; ++j) {
        const size_t at = static_cast<size_t>(r) * k + j;
        kernels::AddScaled(sum, act.expert_weights[at], Row(act.expert_out, dim, moe.entry_of[at]));
      }
      if (shared) kernels::AddInPlace(sum, Row(act.shared_out, dim, r));
      kernels::AddInPlace(Row(act.x, dim, r), sum);
    }
  });
}

void CpuBlasBackend::State::LmHead(std::span<float> logits) {
  const std::vector<cpu_blas::LogitRow>& logit_rows = plan.logit_rows;
  const int n_logits = static_cast<int>(logit_rows.size());
  if (n_logits == 0) return;
  const size_t dim = static_cast<size_t>(config.dim);
  const size_t vocab = static_cast<size_t>(config.vocab_size);
  for (int i = 0; i < n_logits; ++i) {
    Normalize(Row(act.x, dim, logit_rows[i].row), weights.output_norm, Row(act.xf, dim, i));
  }
  // When logit row i is the step's logits row i (every sequence wants its rows), the products go
  // straight into `logits`; else through `out` and scattered (a copy of 128 KB per row for
  // a 32000-token vocabulary).
  bool in_place = true;
  for (int i = 0; i < n_logits; ++i) in_place &= logit_rows[i].slot == i;
  if (in_place) {
    gemm.Run(weights.output, act.xf.data(), n_logits, logits.data());
    return;
  }
  gemm.Run(weights.output, act.xf.data(), n_logits, act.out.data());
  for (int i = 0; i < n_logits; ++i) {
    std::memcpy(logits.data() + static_cast<size_t>(logit_rows[i].slot) * vocab,
                act.out.data() + static_cast<size_t>(i) * vocab, vocab * sizeof(float));
  }
}

absl::Status CpuBlasBackend::Forward(const Batch& batch, std::span<float> logits) {
  State& st = *state_;
  const model::ModelConfig& c = st.config;
  // Check everything before writing anything, so a rejected batch leaves KV untouched.
  if (absl::Status s = ValidateBatch(c, st.layout, batch, logits.size()); !s.ok()) return s;
  if (absl::Status s = CheckKvAlignment(st.layout, batch); !s.ok()) return s;

  cpu_blas::PlanStep(batch,
                     {.n_kv_heads = c.n_kv_heads,
                      .threads = st.pool.size(),
                      .sgemm_attention = !st.gemm_options.batch_invariant},
                     st.plan);
  if (st.plan.rows.empty()) return absl::OkStatus();
  st.act.Reserve(c, st.rows(), static_cast<int>(st.plan.logit_rows.size()));

  st.EmbedTokens();
  for (int l = 0; l < c.n_layers; ++l) {
    const model::LayerWeights& L = st.weights.layers[l];
    st.AttentionNorm(L);
    if (c.mla()) {
      st.ProjectLatent(L);
      st.PrepareAndAppendLatent(batch, L, l);
      st.AttendLatent(batch, L, l);
    } else {
      st.ProjectQkv(L);
      st.PrepareAndAppendKv(batch, L, l);
      st.attention.Run(batch, st.plan, l, st.act.q.data(), st.act.att_out.data());
    }
    st.OutputProjectionAndFfnNorm(L);
    if (c.LayerHasExperts(l)) {
      st.MixtureOfExperts(L);
    } else {
      st.FeedForward(L);
    }
  }
  st.LmHead(logits);
  return absl::OkStatus();
}

}  // namespace kvserve::backends
