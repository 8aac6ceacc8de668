// The forward pass, one token at a time, in the order of llama2.c's run.c. A prefill
// chunk runs its tokens in position order: token t of a layer attends to the K/V that
// tokens 0..t-1 already wrote into the sequence's blocks, which is exactly causal
// attention, so no causal mask is needed. Local (sliding-window) attention is the
// textbook mask on top: the token at pos weighs only [FirstVisiblePosition(pos), pos].
#include "backends/reference/reference_backend.h"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "backends/batch_check.h"
#include "backends/kernels/attention.h"
#include "backends/kernels/kv_rows.h"
#include "backends/kernels/matvec.h"
#include "backends/kernels/mla.h"
#include "backends/kernels/moe.h"
#include "backends/kernels/ops.h"
#include "backends/kernels/qkv.h"
#include "backends/kernels/rope.h"
#include "model/panels.h"

namespace kvserve::backends {

using kernels::KvKind;

namespace {

// Scratch buffers for one token, reused across tokens (llama2.c's RunState).
struct RunState {
  explicit RunState(const model::ModelConfig& c)
      : x(c.dim),
        xb(c.dim),
        xb2(c.dim),
        q(c.q_dim()),
        k(c.kv_dim()),
        v(c.kv_dim()),
        att_out(c.attn_out_dim()),
        q_a(c.q_lora_rank),
        hb(c.max_ffn_dim()),
        hb2(c.max_ffn_dim()),
        moe_out(c.dim),
        router(c.n_experts),
        selection(c.n_experts),
        expert_ids(c.n_experts_used),
        expert_weights(c.n_experts_used) {}
  std::vector<float> x;        // [dim] residual stream of the current token
  std::vector<float> xb;       // [dim] normalised input of a sub-layer
  std::vector<float> xb2;      // [dim] output of a sub-layer, before the residual add
  std::vector<float> q;        // [n_heads * head_dim] query
  std::vector<float> k;        // [kv_dim] key (after RoPE); with MLA the latent row c ‖ k_pe
  std::vector<float> v;        // [kv_dim] value (unused with MLA)
  std::vector<float> att_out;  // [n_heads * value_head_dim] attention output, heads concatenated
  // Multi-head latent attention only (empty otherwise):
  std::vector<float> q_a;         // [q_lora_rank] the compressed query
  kernels::LatentScratch latent;  // AttendLatentDecompressed's buffers
  std::vector<float> hb;          // [max_ffn_dim] gate, then silu(gate) * up
  std::vector<float> hb2;         // [max_ffn_dim] up
  // Mixture of experts only (empty otherwise):
  std::vector<float> moe_out;         // [dim] one expert's (or the shared experts') output
  std::vector<float> router;          // [n_experts] router logits, then their probabilities
  std::vector<float> selection;       // [n_experts] kernels::RouteTopK's selection scores
  std::vector<int32_t> expert_ids;    // [n_experts_used] the experts of this token
  std::vector<float> expert_weights;  // [n_experts_used] and their weights
  std::vector<float> att;             // [n_heads, n_pos] attention weights (grows with n_pos)
};

}  // namespace

struct ReferenceBackend::State {
  State(const model::Model& m, const model::KvLayout& l)
      : config(m.config()),
        weights(m.weights()),
        layout(l),
        rope(kernels::Rope::ForModel(m.config())),
        run(m.config()) {}
  const model::ModelConfig& config;    // dims (llama2.c's Config)
  const model::ModelWeights& weights;  // one view per tensor, shapes in model/weights.h
  const model::KvLayout layout;
  const kernels::Rope rope;
  RunState run;
};

absl::StatusOr<std::unique_ptr<ReferenceBackend>> ReferenceBackend::Create(
    const model::Model& model, const model::KvLayout& kv_layout) {
  if (absl::Status s = ValidateKvLayout(model.config(), kv_layout); !s.ok()) return s;
  if (model::HasPanels(model.weights())) {
    return absl::FailedPreconditionError(
        "reference: the model's weights are packed in panels for the cpu_blas kernels "
        "(LoadOptions::panels); the reference backend reads row-major weights only");
  }
  return std::unique_ptr<ReferenceBackend>(
      new ReferenceBackend(std::make_unique<State>(model, kv_layout)));
}

ReferenceBackend::ReferenceBackend(std::unique_ptr<State> state) : state_(std::move(state)) {}
ReferenceBackend::~ReferenceBackend() = default;

const model::KvLayout& ReferenceBackend::kv_layout() const { return state_->layout; }

namespace {

// A SwiGLU FFN of `width` hidden units on s.xb: out = down(silu(gate · xb) * (up · xb)).
void SwiGluFfn(const model::TensorView& gate, const model::TensorView& up,
               const model::TensorView& down, int width, RunState& s, std::span<float> out) {
  const std::span<float> hb = std::span<float>(s.hb).first(static_cast<size_t>(width));
  const std::span<float> hb2 = std::span<float>(s.hb2).first(static_cast<size_t>(width));
  kernels::MatVec(gate, s.xb, hb);
  kernels::MatVec(up, s.xb, hb2);
  kernels::SwiGlu(hb, hb2);
  kernels::MatVec(down, hb, out);
}

// The FFN of a mixture-of-experts layer on s.xb (the normalized input), added to s.x:
// x += sum_j weight_j * down_e(silu(gate_e · xb) * (up_e · xb)), e = expert_ids[j],
// plus the shared experts' SwiGLU when the model has them.
void MixtureOfExperts(const model::ModelConfig& c, const kernels::ExpertRouting& routing,
                      const model::LayerWeights& L, RunState& s) {
  // Router logits, then the experts and weights of this token (kernels::RouteTopK).
  kernels::MatVec(L.router, s.xb, s.router);
  const std::span<const float> bias = L.expert_probs_bias.data != nullptr
                                          ? kernels::F32Values(L.expert_probs_bias)
                                          : std::span<const float>();
  kernels::RouteTopK(routing, bias, s.router, s.selection, s.expert_ids, s.expert_weights);
  std::fill(s.xb2.begin(), s.xb2.end(), 0.0f);
  for (size_t j = 0; j < s.expert_ids.size(); ++j) {
    const size_t e = static_cast<size_t>(s.expert_ids[j]);
    // The expert's SwiGLU, as the dense FFN's.
    SwiGluFfn(L.expert_gate[e], L.expert_up[e], L.expert_down[e], c.ffn_dim, s, s.moe_out);
    kernels::AddScaled(s.xb2, s.expert_weights[j], s.moe_out);
  }
  if (c.n_shared_experts > 0) {
    // The shared experts run on every token; their output joins the routed sum.
    SwiGluFfn(L.shared_gate, L.shared_up, L.shared_down, c.shared_ffn_dim(), s, s.moe_out);
    kernels::AddInPlace(s.xb2, s.moe_out);
  }
  kernels::AddInPlace(s.x, s.xb2);
}

// Runs one token at absolute position `pos` through every layer, writing its K/V into
// `kv`. On return s.x holds the token's final hidden state (before the final norm).
void ForwardToken(const model::ModelConfig& c, const model::ModelWeights& w,
                  const kernels::Rope& rope, const kernels::SequenceKv& kv, int32_t token, int pos,
                  RunState& s) {
  const kernels::AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim, c.AttentionScale()};
  const int n_pos = pos + 1;
  const int first_pos = c.FirstVisiblePosition(pos);
  const size_t att_size = static_cast<size_t>(c.n_heads) * (n_pos - first_pos);
  if (s.att.size() < att_size) s.att.resize(att_size);
  std::span<float> att(s.att.data(), att_size);

  // Token embedding: dequantise row `token` of the table.
  kernels::RowToFloat(w.token_embedding, token, s.x);

  for (int l = 0; l < c.n_layers; ++l) {
    const model::LayerWeights& L = w.layers[l];

    // Attention RMSNorm.
    kernels::RmsNorm(s.x, kernels::F32Values(L.attn_norm), c.rms_eps, s.xb);

    if (c.mla()) {
      // Latent attention: the query, this token's latent row (cached), then every head on
      // keys and values decompressed from the cached latents of [first_pos, pos].
      kernels::LatentQuery(c, L, rope, pos, s.xb, s.q_a, s.q);
      kernels::LatentRow(c, L, rope, pos, s.xb, s.k);
      kv.Write(l, KvKind::kKey, pos, s.k);
      kernels::AttendLatentDecompressed(c, L, kv, l, first_pos, n_pos, s.q, s.latent, s.att_out);
    } else {
      // Q, K, V of this token only.
      kernels::MatVec(L.wq, s.xb, s.q);
      kernels::MatVec(L.wk, s.xb, s.k);
      kernels::MatVec(L.wv, s.xb, s.v);

      // Biases, Q/K norms (per architecture), then RoPE at the token's absolute position.
      kernels::PrepareQkv(c, L, rope, pos, s.q, s.k, s.v);

      // Append K and V to the sequence's blocks.
      kv.Write(l, KvKind::kKey, pos, s.k);
      kv.Write(l, KvKind::kValue, pos, s.v);

      // Causal attention over positions [first_pos, pos], query head h on KV head h / group.
      kernels::AttendOneQuery(shape, kv, l, first_pos, n_pos, s.q, att, s.att_out);
    }

    // Output projection (and bias) and residual.
    kernels::MatVec(L.wo, s.att_out, s.xb2);
    kernels::AddOutputBias(c, L, s.xb2);
    kernels::AddInPlace(s.x, s.xb2);

    // FFN RMSNorm.
    kernels::RmsNorm(s.x, kernels::F32Values(L.ffn_norm), c.rms_eps, s.xb);

    if (c.LayerHasExperts(l)) {
      MixtureOfExperts(c, kernels::ExpertRouting::ForModel(c), L, s);
      continue;
    }

    // SwiGLU: xb2 = down(silu(gate · xb) * (up · xb)), then the residual.
    SwiGluFfn(L.w_gate, L.w_up, L.w_down, c.DenseFfnDim(), s, s.xb2);
    kernels::AddInPlace(s.x, s.xb2);
  }
}

}  // namespace

absl::Status ReferenceBackend::Forward(const Batch& batch, std::span<float> logits) {
  State& st = *state_;
  const model::ModelConfig& c = st.config;
  // Check everything before writing anything, so a rejected batch leaves KV untouched.
  if (absl::Status s = ValidateBatch(c, st.layout, batch, logits.size()); !s.ok()) return s;

  const size_t vocab = static_cast<size_t>(c.vocab_size);
  const std::vector<size_t> starts = LogitRowStarts(batch);
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceInput& seq = batch.sequences[i];
    const kernels::SequenceKv kv(st.layout, seq.blocks);
    const size_t n = seq.tokens.size();
    const size_t first_logit = n - static_cast<size_t>(seq.logits_rows);
    for (size_t t = 0; t < n; ++t) {
      ForwardToken(c, st.weights, st.rope, kv, seq.tokens[t],
                   seq.cached_tokens + static_cast<int>(t), st.run);
      if (!seq.want_logits || t < first_logit) continue;
      // Final RMSNorm (into xb: x goes on to the next token) and LM head, into the
      // sequence's row for this position.
      kernels::RmsNorm(st.run.x, kernels::F32Values(st.weights.output_norm), c.rms_eps, st.run.xb);
      kernels::MatVec(st.weights.output, st.run.xb,
                      logits.subspan((starts[i] + t - first_logit) * vocab, vocab));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::backends
