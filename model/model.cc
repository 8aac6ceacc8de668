#include "model/model.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

// XXH3-64 (xxHash) over everything that shapes the KV a model computes: the fingerprint
// is part of every KV block's identity across processes and hosts (cache::KvIdentity), so
// it covers every weight byte, not a sample. XXH3 streams at memory speed (an s110m f32
// file of 440 MB hashes in tens of milliseconds).
class Hasher {
 public:
  Hasher() : state_(XXH3_createState()) { XXH3_64bits_reset(state_.get()); }
  void Add(const void* data, size_t n) { XXH3_64bits_update(state_.get(), data, n); }
  template <typename T>
  void AddValue(const T& v) {
    Add(&v, sizeof(v));
  }
  uint64_t value() const { return XXH3_64bits_digest(state_.get()); }

 private:
  struct Free {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  std::unique_ptr<XXH3_state_t, Free> state_;
};

// Hashes shape, type and every byte.
void HashTensor(Hasher& h, const TensorView& t) {
  h.AddValue(t.type);
  h.AddValue(t.rows);
  h.AddValue(t.cols);
  h.Add(t.data, static_cast<size_t>(t.rows) * t.row_bytes());
}

absl::Status CheckShape(const std::string& name, const TensorView& t, int64_t rows, int64_t cols) {
  if (t.data == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is missing"));
  if (t.rows != rows || t.cols != cols) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has shape [", t.rows, ", ",
                                                   t.cols, "], expected [", rows, ", ", cols, "]"));
  }
  if (cols % DTypeBlockElems(t.type) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, ": ", std::string(DTypeName(t.type)),
                     " rows must be a multiple of ", DTypeBlockElems(t.type), " elements"));
  }
  return absl::OkStatus();
}

absl::Status CheckNorm(const std::string& name, const TensorView& t, int64_t dim) {
  if (absl::Status s = CheckShape(name, t, 1, dim); !s.ok()) return s;
  if (t.type != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " must be f32, is ", std::string(DTypeName(t.type))));
  }
  return absl::OkStatus();
}

// A vector the config asks for (an F32 [1, dim] view) or does not (an empty view).
absl::Status CheckOptional(const std::string& name, const TensorView& t, bool wanted, int64_t dim) {
  if (wanted) return CheckNorm(name, t, dim);
  if (t.data != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " is present but the model config does not use it"));
  }
  return absl::OkStatus();
}

// The experts of one matrix: `c.n_experts` views of shape [rows, cols], or none when
// `wanted` is false.
absl::Status CheckExperts(const ModelConfig& c, bool wanted, const std::string& name,
                          const std::vector<TensorView>& experts, int64_t rows, int64_t cols) {
  if (!wanted) {
    if (experts.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " is present but the model config has no experts"));
  }
  if (experts.empty())
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is missing"));
  if (experts.size() != static_cast<size_t>(c.n_experts)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " has ", experts.size(), " experts, expected ", c.n_experts));
  }
  for (size_t e = 0; e < experts.size(); ++e) {
    if (absl::Status s =
            CheckShape(absl::StrCat(name, " (expert ", e, ")"), experts[e], rows, cols);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// A matrix the config asks for with this shape, or (not wanted) an empty view.
absl::Status CheckWanted(const std::string& name, const TensorView& t, bool wanted, int64_t rows,
                         int64_t cols, std::string_view unwanted_reason) {
  if (wanted) return CheckShape(name, t, rows, cols);
  if (t.data == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("tensor ", name, " is present but ", std::string(unwanted_reason)));
}

// Layer l's FFN: the dense matrices, or (ModelConfig::LayerHasExperts) the router, the
// experts, the shared experts and the selection bias, each exactly when the config says.
absl::Status CheckFfn(const ModelConfig& c, const LayerWeights& L, int l, const std::string& p) {
  const bool moe = c.LayerHasExperts(l);
  const int64_t f = c.DenseFfnDim(), e = c.ffn_dim, sh = c.shared_ffn_dim();
  const std::string_view no_experts = "the model config has no experts";
  const std::string_view dense_reason = "the model config has experts instead";
  absl::Status s = CheckWanted(p + "ffn_gate.weight", L.w_gate, !moe, f, c.dim, dense_reason);
  if (s.ok()) s = CheckWanted(p + "ffn_up.weight", L.w_up, !moe, f, c.dim, dense_reason);
  if (s.ok()) s = CheckWanted(p + "ffn_down.weight", L.w_down, !moe, c.dim, f, dense_reason);
  if (s.ok()) {
    s = CheckWanted(p + "ffn_gate_inp.weight", L.router, moe, c.n_experts, c.dim, no_experts);
  }
  if (s.ok()) s = CheckExperts(c, moe, p + "ffn_gate_exps.weight", L.expert_gate, e, c.dim);
  if (s.ok()) s = CheckExperts(c, moe, p + "ffn_up_exps.weight", L.expert_up, e, c.dim);
  if (s.ok()) s = CheckExperts(c, moe, p + "ffn_down_exps.weight", L.expert_down, c.dim, e);
  const bool shared = moe && c.n_shared_experts > 0;
  const std::string_view no_shared = "the model config has no shared experts here";
  if (s.ok())
    s = CheckWanted(p + "ffn_gate_shexp.weight", L.shared_gate, shared, sh, c.dim, no_shared);
  if (s.ok()) s = CheckWanted(p + "ffn_up_shexp.weight", L.shared_up, shared, sh, c.dim, no_shared);
  if (s.ok())
    s = CheckWanted(p + "ffn_down_shexp.weight", L.shared_down, shared, c.dim, sh, no_shared);
  if (s.ok()) {
    s = CheckOptional(p + "exp_probs_b.bias", L.expert_probs_bias, moe && c.expert_probs_bias,
                      c.n_experts);
  }
  return s;
}

// The Q, K and V projections of ordinary attention.
absl::Status CheckAttention(const ModelConfig& c, const LayerWeights& L, const std::string& p) {
  absl::Status s = CheckShape(p + "attn_q.weight", L.wq, c.q_dim(), c.dim);
  if (s.ok()) s = CheckShape(p + "attn_k.weight", L.wk, c.kv_dim(), c.dim);
  if (s.ok()) s = CheckShape(p + "attn_v.weight", L.wv, c.kv_dim(), c.dim);
  return s;
}

// The projections of multi-head latent attention (model/weights.h).
absl::Status CheckLatentAttention(const ModelConfig& c, const LayerWeights& L,
                                  const std::string& p) {
  const int r = c.kv_lora_rank, nope = c.head_dim - c.rope_dim;
  absl::Status s;
  if (c.q_lora_rank > 0) {
    s = CheckShape(p + "attn_q_a.weight", L.wq_a, c.q_lora_rank, c.dim);
    if (s.ok()) s = CheckNorm(p + "attn_q_a_norm.weight", L.q_a_norm, c.q_lora_rank);
    if (s.ok()) s = CheckShape(p + "attn_q_b.weight", L.wq_b, c.q_dim(), c.q_lora_rank);
  } else {
    s = CheckShape(p + "attn_q.weight", L.wq, c.q_dim(), c.dim);
  }
  if (s.ok()) s = CheckShape(p + "attn_kv_a_mqa.weight", L.wkv_a, r + c.rope_dim, c.dim);
  if (s.ok()) s = CheckNorm(p + "attn_kv_a_norm.weight", L.kv_a_norm, r);
  if (s.ok()) s = CheckShape(p + "attn_k_b.weight", L.wk_b, int64_t{c.n_heads} * r, nope);
  if (s.ok()) {
    s = CheckShape(p + "attn_v_b.weight", L.wv_b, int64_t{c.n_heads} * c.v_head_dim, r);
  }
  return s;
}

absl::Status CheckWeights(const ModelConfig& c, const ModelWeights& w) {
  if (static_cast<int>(w.layers.size()) != c.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("model has ", w.layers.size(),
                                                   " layers of weights, config says ", c.n_layers));
  }
  absl::Status s = CheckShape("token_embd.weight", w.token_embedding, c.vocab_size, c.dim);
  if (s.ok()) s = CheckNorm("output_norm.weight", w.output_norm, c.dim);
  if (s.ok()) s = CheckShape("output.weight", w.output, c.vocab_size, c.dim);
  for (int l = 0; s.ok() && l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = absl::StrCat("blk.", l, ".");
    s = CheckNorm(p + "attn_norm.weight", L.attn_norm, c.dim);
    if (s.ok()) s = c.mla() ? CheckLatentAttention(c, L, p) : CheckAttention(c, L, p);
    if (s.ok()) s = CheckShape(p + "attn_output.weight", L.wo, c.dim, c.attn_out_dim());
    if (s.ok()) s = CheckNorm(p + "ffn_norm.weight", L.ffn_norm, c.dim);
    if (s.ok()) s = CheckFfn(c, L, l, p);
    if (s.ok()) s = CheckOptional(p + "attn_q.bias", L.bq, c.attention_qkv_bias, c.q_dim());
    if (s.ok()) s = CheckOptional(p + "attn_k.bias", L.bk, c.attention_qkv_bias, c.kv_dim());
    if (s.ok()) s = CheckOptional(p + "attn_v.bias", L.bv, c.attention_qkv_bias, c.kv_dim());
    if (s.ok()) s = CheckOptional(p + "attn_output.bias", L.bo, c.attention_output_bias, c.dim);
    if (s.ok()) s = CheckOptional(p + "attn_q_norm.weight", L.q_norm, c.qk_norm, c.head_dim);
    if (s.ok()) s = CheckOptional(p + "attn_k_norm.weight", L.k_norm, c.qk_norm, c.head_dim);
  }
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::FromParts(ModelConfig config, ModelWeights weights,
                                                        Vocabulary vocab,
                                                        std::shared_ptr<const void> storage) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  if (absl::Status s = CheckWeights(config, weights); !s.ok()) return s;
  if (vocab.size() != config.vocab_size || vocab.scores.size() != vocab.pieces.size() ||
      vocab.kinds.size() != vocab.pieces.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocabulary has ", vocab.size(), " tokens, model has vocab_size ", config.vocab_size));
  }
  for (auto [name, id] : {std::pair<const char*, int32_t>{"bos", vocab.bos_id},
                          {"eos", vocab.eos_id},
                          {"unk", vocab.unk_id}}) {
    const bool none_allowed = std::string_view(name) == "unk" && id == -1;
    if (!none_allowed && (id < 0 || id >= vocab.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocabulary: ", name, " token id ", id, " is out of range"));
    }
  }

  Hasher h;
  h.Add(config.architecture.data(), config.architecture.size());
  for (int v : {config.dim, config.n_layers, config.n_heads, config.n_kv_heads, config.head_dim,
                config.ffn_dim, config.vocab_size, config.rope_dim}) {
    h.AddValue(v);
  }
  if (config.moe()) {
    h.AddValue(config.n_experts);
    h.AddValue(config.n_experts_used);
    // deepseek2's routing, when it is not qwen3moe's (whose fingerprints stay as they were).
    if (!config.PlainExpertRouting()) {
      for (int v : {config.n_dense_layers, config.dense_ffn_dim, config.n_shared_experts,
                    config.n_expert_groups, config.n_expert_groups_used}) {
        h.AddValue(v);
      }
      h.AddValue(config.expert_gating);
      h.AddValue(config.expert_probs_bias);
      h.AddValue(config.expert_weights_norm);
      h.AddValue(config.expert_weights_scale);
    }
  }
  if (config.mla()) {
    h.AddValue(config.kv_lora_rank);
    h.AddValue(config.q_lora_rank);
    h.AddValue(config.v_head_dim);
  }
  h.AddValue(config.rms_eps);
  h.AddValue(config.rope_base);
  h.AddValue(config.rope_style);
  h.AddValue(config.rope_freq_scale);
  h.Add(config.rope_freq_factors.data(), config.rope_freq_factors.size() * sizeof(float));
  // YaRN and the RoPE magnitude only when a file declares them, so that other models keep
  // their identity (the rest follows from rope_freq_scale).
  if (config.yarn_ext_factor != 0.0f || config.rope_attn_factor != 1.0f) {
    for (float v : {config.yarn_ext_factor, config.yarn_beta_fast, config.yarn_beta_slow,
                    config.RopeMagnitude(), config.AttentionScale()}) {
      h.AddValue(v);
    }
    h.AddValue(config.YarnOrigContextLength());
  }
  for (bool b : {config.tied_embeddings, config.attention_qkv_bias, config.attention_output_bias,
                 config.qk_norm}) {
    h.AddValue(b);
  }
  h.AddValue(config.sliding_window);
  for (const std::string& piece : vocab.pieces) h.Add(piece.data(), piece.size() + 1);
  h.Add(vocab.scores.data(), vocab.scores.size() * sizeof(vocab.scores[0]));
  h.Add(vocab.kinds.data(), vocab.kinds.size() * sizeof(vocab.kinds[0]));
  for (int32_t id : {vocab.bos_id, vocab.eos_id, vocab.unk_id}) h.AddValue(id);
  h.AddValue(static_cast<int32_t>(vocab.model));
  for (const std::string& merge : vocab.merges) h.Add(merge.data(), merge.size() + 1);
  h.Add(vocab.pre_tokenizer.data(), vocab.pre_tokenizer.size());
  h.Add(vocab.rstrip_ids.data(), vocab.rstrip_ids.size() * sizeof(vocab.rstrip_ids[0]));
  HashTensor(h, weights.token_embedding);
  HashTensor(h, weights.output);
  HashTensor(h, weights.output_norm);
  for (const LayerWeights& L : weights.layers) {
    for (const TensorView* t :
         {&L.attn_norm, &L.wq,   &L.wk,    &L.wv,        &L.wo,   &L.ffn_norm, &L.w_gate, &L.w_up,
          &L.w_down,    &L.bq,   &L.bk,    &L.bv,        &L.bo,   &L.q_norm,   &L.k_norm, &L.wq_a,
          &L.q_a_norm,  &L.wq_b, &L.wkv_a, &L.kv_a_norm, &L.wk_b, &L.wv_b}) {
      if (t->data != nullptr) HashTensor(h, *t);
    }
    for (const TensorView* t :
         {&L.router, &L.expert_probs_bias, &L.shared_gate, &L.shared_up, &L.shared_down}) {
      if (t->data != nullptr) HashTensor(h, *t);
    }
    for (const std::vector<TensorView>* experts : {&L.expert_gate, &L.expert_up, &L.expert_down}) {
      for (const TensorView& t : *experts) HashTensor(h, t);
    }
  }

  std::unique_ptr<Model> m(new Model());
  m->config_ = std::move(config);
  m->weights_ = std::move(weights);
  m->vocab_ = std::move(vocab);
  m->storage_ = std::move(storage);
  m->fingerprint_ = h.value();
  return m;
}

}  // namespace kvserve::model
