#include "model/gguf_llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "model/pre_tokenizer.h"

namespace kvserve::model {
namespace {

absl::Status Missing(std::string_view key) {
  return absl::InvalidArgumentError(absl::StrCat("missing metadata key ", std::string(key)));
}

absl::Status WrongType(std::string_view key, const GgufValue& v, std::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat("metadata key ", std::string(key), " has type ",
                                                 v.Describe(), ", expected ",
                                                 std::string(expected)));
}

// An integer key that fits in int32; nullopt when absent.
absl::StatusOr<std::optional<int>> OptionalInt(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.FindMetadata(key);
  if (v == nullptr) return std::optional<int>();
  const std::optional<int64_t> i = v->AsInt();
  if (!i.has_value()) return WrongType(key, *v, "an integer");
  if (*i < std::numeric_limits<int32_t>::min() || *i > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata key ", std::string(key), " = ", *i, " is out of range"));
  }
  return std::optional<int>(static_cast<int>(*i));
}

absl::StatusOr<int> RequiredInt(const GgufFile& f, std::string_view key) {
  absl::StatusOr<std::optional<int>> v = OptionalInt(f, key);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return Missing(key);
  return **v;
}

absl::StatusOr<std::optional<float>> OptionalFloat(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.FindMetadata(key);
  if (v == nullptr) return std::optional<float>();
  const std::optional<double> d = v->AsFloat();
  if (!d.has_value()) return WrongType(key, *v, "a float");
  return std::optional<float>(static_cast<float>(*d));
}

absl::StatusOr<bool> BoolOr(const GgufFile& f, std::string_view key, bool dflt) {
  const GgufValue* v = f.FindMetadata(key);
  if (v == nullptr) return dflt;
  const std::optional<bool> b = v->AsBool();
  if (!b.has_value()) return WrongType(key, *v, "bool");
  return *b;
}

absl::StatusOr<std::string_view> RequiredString(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.FindMetadata(key);
  if (v == nullptr) return Missing(key);
  const std::optional<std::string_view> s = v->AsString();
  if (!s.has_value()) return WrongType(key, *v, "string");
  return *s;
}

// The array at `key` (nullptr when absent) after checking its element kind and length.
// A string key's value, "" when absent; INVALID_ARGUMENT when not a string.
absl::StatusOr<std::string> StringOr(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.FindMetadata(key);
  if (v == nullptr) return std::string();
  const std::optional<std::string_view> s = v->AsString();
  if (!s.has_value()) return WrongType(key, *v, "string");
  return std::string(*s);
}

absl::StatusOr<const GgufValue*> OptionalArray(const GgufFile& f, std::string_view key,
                                               std::string_view expected, bool (*elem_ok)(GgufType),
                                               uint64_t length) {
  const GgufValue* v = f.FindMetadata(key);
  if (v == nullptr) return v;
  if (v->type() != GgufType::kArray || !elem_ok(v->elem_type())) {
    return WrongType(key, *v, expected);
  }
  if (v->size() != length) {
    return absl::InvalidArgumentError(absl::StrCat("metadata key ", std::string(key), " has ",
                                                   v->size(),
                                                   " entries, tokenizer.ggml.tokens has ", length));
  }
  return v;
}

bool IsFloatType(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }
bool IsIntType(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<int32_t> TokenIdOr(const GgufFile& f, std::string_view key, int32_t dflt) {
  absl::StatusOr<std::optional<int>> v = OptionalInt(f, key);
  if (!v.ok()) return v.status();
  return v->value_or(dflt);
}

TensorView View(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return TensorView{};
  return TensorView{t->dtype, t->data, t->rows(), t->cols()};
}

// The rope_freqs.weight tensor (Llama 3.x RoPE factors): F32 with rope_dim / 2 elements,
// or absent (empty result).
absl::StatusOr<std::vector<float>> RopeFreqFactors(const GgufFile& f, int rope_dim) {
  const GgufTensorInfo* t = f.FindTensor("rope_freqs.weight");
  if (t == nullptr) return std::vector<float>();
  if (t->dtype != DType::kF32 || t->rows() * t->cols() != rope_dim / 2) {
    return absl::InvalidArgumentError(absl::StrCat("tensor rope_freqs.weight must be f32 with ",
                                                   rope_dim / 2, " elements (rope_dim / 2)"));
  }
  std::vector<float> factors(static_cast<size_t>(rope_dim / 2));
  std::memcpy(factors.data(), t->data, factors.size() * sizeof(float));
  return factors;
}

// llama.cpp gives Phi-3's special tokens (general.name containing "phi-3" or "phi3",
// any case) the RSTRIP attribute, except <unk>, <s> and <|endoftext|>.
void SetRstripTokens(const GgufFile& file, Vocabulary& v) {
  const GgufValue* name_value = file.FindMetadata("general.name");
  const std::optional<std::string_view> name =
      name_value == nullptr ? std::nullopt : name_value->AsString();
  if (!name.has_value()) return;
  const std::string lower = absl::AsciiStrToLower(std::string(*name));
  if (lower.find("phi-3") == std::string::npos && lower.find("phi3") == std::string::npos) return;
  for (int32_t id = 0; id < v.size(); ++id) {
    const TokenKind kind = v.kinds[id];
    const std::string& piece = v.pieces[id];
    const bool special = kind == TokenKind::kControl || kind == TokenKind::kUserDefined ||
                         kind == TokenKind::kUnknown || piece == "</s>";
    if (special && piece != "<unk>" && piece != "<s>" && piece != "<|endoftext|>") {
      v.rstrip_ids.push_back(id);
    }
  }
}

// The expert counts of a mixture-of-experts architecture, as llama.cpp reads them for
// every architecture: expert_count and expert_used_count (required, 1 <= used <= count),
// and expert_group_count / expert_group_used_count (group-limited routing when the count
// is above 1; ModelConfig::Validate checks them).
absl::Status ReadExpertCounts(const GgufFile& f,
                              const std::function<std::string(std::string_view)>& key,
                              ModelConfig& c) {
  absl::StatusOr<int> count = RequiredInt(f, key("expert_count"));
  if (!count.ok()) return count.status();
  absl::StatusOr<int> used = RequiredInt(f, key("expert_used_count"));
  if (!used.ok()) return used.status();
  if (*count < 1 || *used < 1 || *used > *count) {
    return absl::InvalidArgumentError(absl::StrCat(key("expert_used_count"), " ", *used,
                                                   " must be in [1, ", key("expert_count"), " ",
                                                   *count, "]"));
  }
  c.n_experts = *count;
  c.n_experts_used = *used;
  absl::StatusOr<std::optional<int>> groups = OptionalInt(f, key("expert_group_count"));
  if (!groups.ok()) return groups.status();
  absl::StatusOr<std::optional<int>> groups_used = OptionalInt(f, key("expert_group_used_count"));
  if (!groups_used.ok()) return groups_used.status();
  if (groups->value_or(0) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(key("expert_group_count"), " must be >= 0"));
  }
  if (groups->value_or(0) > 1) {
    c.n_expert_groups = **groups;
    c.n_expert_groups_used = groups_used->value_or(0);
  }
  return absl::OkStatus();
}

// qwen3moe's experts: the counts, and the expert FFN size expert_feed_forward_length,
// else feed_forward_length / expert_used_count.
absl::Status ReadExperts(const GgufFile& f, const std::function<std::string(std::string_view)>& key,
                         ModelConfig& c) {
  if (absl::Status s = ReadExpertCounts(f, key, c); !s.ok()) return s;
  absl::StatusOr<std::optional<int>> expert_ffn = OptionalInt(f, key("expert_feed_forward_length"));
  if (!expert_ffn.ok()) return expert_ffn.status();
  if (expert_ffn->has_value() && **expert_ffn != 0) {
    c.ffn_dim = **expert_ffn;
    return absl::OkStatus();
  }
  absl::StatusOr<int> ffn = RequiredInt(f, key("feed_forward_length"));
  if (!ffn.ok()) return ffn.status();
  c.ffn_dim = *ffn / c.n_experts_used;
  return absl::OkStatus();
}

// deepseek2's FFNs, as llama.cpp's llama_model_deepseek2 reads them: the first
// leading_dense_block_count layers (default 0) are dense of feed_forward_length (already
// in c.ffn_dim), the others mixtures of experts (when there are any): the counts
// (ReadExpertCounts), expert_feed_forward_length and expert_shared_count (required),
// expert_weights_scale (0 or absent = 1), expert_weights_norm (default false),
// expert_gating_func (1 softmax, 2 sigmoid; absent or 0 = softmax, except sigmoid for
// GLM 4.7 Lite's shape, 47 or 48 layers and 154880 tokens, as llama.cpp), and the routing
// bias exp_probs_b when the first such layer has it. UNIMPLEMENTED for another gating
// function, for nextn_predict_layers (multi-token prediction layers) and for
// attention.temperature_scale (Mistral Large 3's attention temperature). Call after
// n_layers, ffn_dim and vocab_size are set.
absl::Status ReadDeepseekFfn(const GgufFile& f,
                             const std::function<std::string(std::string_view)>& key,
                             ModelConfig& c) {
  absl::StatusOr<std::optional<int>> nextn = OptionalInt(f, key("nextn_predict_layers"));
  if (!nextn.ok()) return nextn.status();
  if (nextn->value_or(0) != 0) {
    return absl::UnimplementedError(
        absl::StrCat(key("nextn_predict_layers"), " ", **nextn,
                     ": multi-token prediction layers are not supported"));
  }
  if (f.FindMetadata(key("attention.temperature_scale")) != nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        key("attention.temperature_scale"), ": attention temperature tuning is not supported"));
  }
  absl::StatusOr<std::optional<int>> dense = OptionalInt(f, key("leading_dense_block_count"));
  if (!dense.ok()) return dense.status();
  if (dense->value_or(0) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(key("leading_dense_block_count"), " must be >= 0, got ", **dense));
  }
  if (dense->value_or(0) >= c.n_layers) return absl::OkStatus();  // every layer dense
  if (absl::Status s = ReadExpertCounts(f, key, c); !s.ok()) return s;
  c.n_dense_layers = dense->value_or(0);
  c.dense_ffn_dim = c.n_dense_layers > 0 ? c.ffn_dim : 0;
  for (auto [name, field] : {std::pair<const char*, int*>{"expert_feed_forward_length", &c.ffn_dim},
                             {"expert_shared_count", &c.n_shared_experts}}) {
    absl::StatusOr<int> v = RequiredInt(f, key(name));
    if (!v.ok()) return v.status();
    if (*v < 0) {
      return absl::InvalidArgumentError(absl::StrCat(key(name), " must be >= 0, got ", *v));
    }
    *field = *v;
  }
  absl::StatusOr<std::optional<float>> scale = OptionalFloat(f, key("expert_weights_scale"));
  if (!scale.ok()) return scale.status();
  const float w_scale = scale->value_or(0.0f);
  c.expert_weights_scale = w_scale == 0.0f ? 1.0f : w_scale;  // llama.cpp: 0 = no scaling
  absl::StatusOr<bool> norm = BoolOr(f, key("expert_weights_norm"), false);
  if (!norm.ok()) return norm.status();
  c.expert_weights_norm = *norm;
  absl::StatusOr<std::optional<int>> gating = OptionalInt(f, key("expert_gating_func"));
  if (!gating.ok()) return gating.status();
  const int func = gating->value_or(0);
  if (func == 0) {
    const bool glm47_lite = (c.n_layers == 47 || c.n_layers == 48) && c.vocab_size == 154880;
    c.expert_gating = glm47_lite ? ExpertGating::kSigmoid : ExpertGating::kSoftmax;
  } else if (func == static_cast<int>(ExpertGating::kSoftmax) ||
             func == static_cast<int>(ExpertGating::kSigmoid)) {
    c.expert_gating = static_cast<ExpertGating>(func);
  } else {
    return absl::UnimplementedError(absl::StrCat(key("expert_gating_func"), " ", func,
                                                 " is not supported (1 softmax, 2 sigmoid)"));
  }
  c.expert_probs_bias =
      f.FindTensor(absl::StrCat("blk.", c.n_dense_layers, ".exp_probs_b.bias")) != nullptr;
  return absl::OkStatus();
}

// Experts of the 3-D tensor `name` (GGUF ne = {cols, rows, experts}).
int64_t ExpertCount(const GgufTensorInfo& t) { return t.ne[2] * t.ne[3]; }

// INVALID_ARGUMENT naming the first expert tensor whose expert count is not the config's;
// UNIMPLEMENTED for a fused ffn_gate_up_exps (which kvserve does not read).
absl::Status CheckExpertCounts(const GgufFile& f, const ModelConfig& c) {
  if (!c.moe()) return absl::OkStatus();
  for (int l = 0; l < c.n_layers; ++l) {
    for (const char* kind : {"gate", "up", "down"}) {
      const std::string name = absl::StrCat("blk.", l, ".ffn_", kind, "_exps.weight");
      const GgufTensorInfo* t = f.FindTensor(name);
      if (t != nullptr && ExpertCount(*t) != c.n_experts) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has ", ExpertCount(*t),
                                                       " experts, expected ", c.n_experts));
      }
    }
    const std::string fused = absl::StrCat("blk.", l, ".ffn_gate_up_exps.weight");
    if (f.FindTensor(fused) != nullptr) {
      return absl::UnimplementedError(
          absl::StrCat("tensor ", fused,
                       ": fused gate and up experts are not supported (ffn_gate_exps and "
                       "ffn_up_exps are)"));
    }
  }
  return absl::OkStatus();
}

// One view per expert of the 3-D tensor `name`: expert e is the e-th [rows, cols] slice.
// Empty when the tensor is absent; a 2-D tensor is one expert (Model::FromParts reports
// the count). At most max_experts + 1 views, whatever the file says (a file's count is
// checked by CheckExpertCounts first; the cap keeps a crafted one from making a list many
// times the file's size when a caller did not).
std::vector<TensorView> ExpertViews(const GgufFile& f, const std::string& name,
                                    int64_t max_experts) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return {};
  const int64_t rows = t->ne[1];
  const int64_t experts = std::min(ExpertCount(*t), max_experts + 1);
  std::vector<TensorView> views;
  views.reserve(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) {
    TensorView v{t->dtype, nullptr, rows, t->cols()};
    v.data = static_cast<const uint8_t*>(t->data) + static_cast<size_t>(e * rows) * v.row_bytes();
    views.push_back(v);
  }
  return views;
}

// deepseek2's multi-head latent attention, as llama.cpp's llama_model_deepseek2 reads it:
// attention.kv_lora_rank (required), attention.q_lora_rank (0 or absent = a plain attn_q),
// attention.key_length_mla / value_length_mla (the per-head query and value widths; both
// required: files without them carry the older attn_kv_b, which kvserve does not read),
// attention.key_length / value_length when present must be the latent's widths
// (kv_lora_rank + rope dim, kv_lora_rank). Call after rope_dim is set.
absl::Status ReadLatentAttention(const GgufFile& f,
                                 const std::function<std::string(std::string_view)>& key,
                                 ModelConfig& c) {
  absl::StatusOr<int> kv_rank = RequiredInt(f, key("attention.kv_lora_rank"));
  if (!kv_rank.ok()) return kv_rank.status();
  absl::StatusOr<std::optional<int>> q_rank = OptionalInt(f, key("attention.q_lora_rank"));
  if (!q_rank.ok()) return q_rank.status();
  absl::StatusOr<std::optional<int>> k_mla = OptionalInt(f, key("attention.key_length_mla"));
  if (!k_mla.ok()) return k_mla.status();
  absl::StatusOr<std::optional<int>> v_mla = OptionalInt(f, key("attention.value_length_mla"));
  if (!v_mla.ok()) return v_mla.status();
  if (!k_mla->has_value() || !v_mla->has_value() || **k_mla == 0 || **v_mla == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "deepseek2 without ", key("attention.key_length_mla"), " and ",
        key("attention.value_length_mla"),
        " (the older attn_kv_b form) is not supported; convert the model with a current "
        "llama.cpp convert_hf_to_gguf.py (attn_k_b and attn_v_b)"));
  }
  if (*kv_rank <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(key("attention.kv_lora_rank"), " must be positive, got ", *kv_rank));
  }
  c.kv_lora_rank = *kv_rank;
  c.q_lora_rank = q_rank->value_or(0);
  c.head_dim = **k_mla;
  c.v_head_dim = **v_mla;
  c.n_kv_heads = 1;  // the latent is one head shared by every query head
  // In 64 bits: the ranks are checked against their limits later (ModelConfig::Validate),
  // so a file's rank near INT_MAX must not overflow here first.
  for (auto [name, want] : {std::pair<const char*, int64_t>{"attention.key_length",
                                                            int64_t{c.kv_lora_rank} + c.rope_dim},
                            {"attention.value_length", c.kv_lora_rank}}) {
    absl::StatusOr<std::optional<int>> v = OptionalInt(f, key(name));
    if (!v.ok()) return v.status();
    if (v->has_value() && **v != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          key(name), " ", **v, " must be ", want, " (the latent: kv_lora_rank ", c.kv_lora_rank,
          " + rope dim ", c.rope_dim, " for keys, kv_lora_rank for values)"));
    }
  }
  return absl::OkStatus();
}

// RoPE scaling as llama.cpp reads it for these architectures (llama_model::load_hparams,
// the deepseek2 loader, llama_context's yarn_* parameters):
//   rope.scaling.type  "none", "linear" (the default when absent) or "yarn"; "longrope" is
//                      UNIMPLEMENTED, anything else INVALID_ARGUMENT
//   rope.scaling.factor, else the older rope.scale_linear: rope_freq_scale = 1 / factor
//                      (0 or absent: 1; "none": 1 whatever the factor)
//   rope.scaling.original_context_length  YaRN's original context (0 or absent:
//                      context_length)
//   rope.scaling.attn_factor  rope_attn_factor (default 1)
//   rope.scaling.yarn_log_multiplier  deepseek2 only: yarn_log_multiplier = value / 0.1
// With "yarn", yarn_ext_factor = 1; llama.cpp reads no yarn_ext_factor, yarn_attn_factor or
// yarn_beta_* keys for these architectures, so they keep ModelConfig's defaults here too.
absl::Status ReadRopeScaling(const GgufFile& f,
                             const std::function<std::string(std::string_view)>& key,
                             ModelConfig& c) {
  std::string_view type = "linear";
  if (f.FindMetadata(key("rope.scaling.type")) != nullptr) {
    absl::StatusOr<std::string_view> t = RequiredString(f, key("rope.scaling.type"));
    if (!t.ok()) return t.status();
    type = *t;
  }
  if (type == "longrope") {
    return absl::UnimplementedError(
        absl::StrCat(key("rope.scaling.type"),
                     " \"longrope\" (Phi-3's long and short RoPE factors) is not supported yet "
                     "(supported: none, linear, yarn)"));
  }
  if (type != "none" && type != "linear" && type != "yarn") {
    return absl::InvalidArgumentError(absl::StrCat(key("rope.scaling.type"), " \"",
                                                   std::string(type),
                                                   "\" is not a RoPE scaling type (none, linear, "
                                                   "yarn)"));
  }
  absl::StatusOr<std::optional<float>> factor = OptionalFloat(f, key("rope.scaling.factor"));
  if (!factor.ok()) return factor.status();
  if (!factor->has_value()) {
    factor = OptionalFloat(f, key("rope.scale_linear"));
    if (!factor.ok()) return factor.status();
  }
  const float v = factor->value_or(0.0f);
  if (v != 0.0f && (!(v > 0.0f) || !std::isfinite(v))) {
    return absl::InvalidArgumentError(
        absl::StrCat(key("rope.scaling.factor"), " must be a positive finite number, got ", v));
  }
  c.rope_freq_scale = type == "none" || v == 0.0f ? 1.0f : 1.0f / v;
  c.yarn_ext_factor = type == "yarn" ? 1.0f : 0.0f;

  absl::StatusOr<std::optional<int>> orig =
      OptionalInt(f, key("rope.scaling.original_context_length"));
  if (!orig.ok()) return orig.status();
  c.yarn_orig_context_length = orig->value_or(0);
  absl::StatusOr<std::optional<float>> attn = OptionalFloat(f, key("rope.scaling.attn_factor"));
  if (!attn.ok()) return attn.status();
  c.rope_attn_factor = attn->value_or(1.0f);
  if (c.architecture == "deepseek2") {
    absl::StatusOr<std::optional<float>> log_mul =
        OptionalFloat(f, key("rope.scaling.yarn_log_multiplier"));
    if (!log_mul.ok()) return log_mul.status();
    // The converter writes 0.1 * mscale_all_dim; llama.cpp cancels the 0.1.
    if (log_mul->has_value()) c.yarn_log_multiplier = **log_mul / 0.1f;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> LlamaConfigFromGguf(const GgufFile& file) {
  absl::StatusOr<std::string_view> arch = RequiredString(file, "general.architecture");
  if (!arch.ok()) return arch.status();
  if (*arch != "llama" && *arch != "qwen2" && *arch != "qwen3" && *arch != "qwen3moe" &&
      *arch != "deepseek2") {
    return absl::InvalidArgumentError(
        absl::StrCat("architecture \"", std::string(*arch),
                     "\" is not supported (supported: llama, qwen2, qwen3, qwen3moe, deepseek2)"));
  }
  const bool deepseek2 = *arch == "deepseek2";
  ModelConfig c;
  c.architecture = std::string(*arch);
  // Every hyperparameter key is "<arch>.<name>".
  auto key = [&c](std::string_view name) {
    return absl::StrCat(c.architecture, ".", std::string(name));
  };
  // llama.cpp: LLAMA_ROPE_TYPE_NORM for llama and deepseek2, LLAMA_ROPE_TYPE_NEOX for
  // qwen2/qwen3.
  c.rope_style =
      c.architecture == "llama" || deepseek2 ? RopeStyle::kAdjacentPairs : RopeStyle::kRotateHalves;
  for (auto [name, field] : {std::pair<const char*, int*>{"embedding_length", &c.dim},
                             {"block_count", &c.n_layers},
                             {"attention.head_count", &c.n_heads},
                             {"context_length", &c.context_length}}) {
    absl::StatusOr<int> v = RequiredInt(file, key(name));
    if (!v.ok()) return v.status();
    *field = *v;
  }
  if (c.architecture == "qwen3moe") {
    if (absl::Status s = ReadExperts(file, key, c); !s.ok()) return s;
  } else {
    absl::StatusOr<int> ffn = RequiredInt(file, key("feed_forward_length"));
    if (!ffn.ok()) return ffn.status();
    c.ffn_dim = *ffn;
  }
  absl::StatusOr<std::optional<float>> eps =
      OptionalFloat(file, key("attention.layer_norm_rms_epsilon"));
  if (!eps.ok()) return eps.status();
  if (!eps->has_value()) return Missing(key("attention.layer_norm_rms_epsilon"));
  c.rms_eps = **eps;

  absl::StatusOr<std::optional<float>> base = OptionalFloat(file, key("rope.freq_base"));
  if (!base.ok()) return base.status();
  c.rope_base = base->value_or(10000.0f);
  if (absl::Status s = ReadRopeScaling(file, key, c); !s.ok()) return s;

  absl::StatusOr<std::optional<int>> kv = OptionalInt(file, key("attention.head_count_kv"));
  if (!kv.ok()) return kv.status();
  c.n_kv_heads = kv->value_or(c.n_heads);

  absl::StatusOr<std::optional<int>> key_len = OptionalInt(file, key("attention.key_length"));
  if (!key_len.ok()) return key_len.status();
  if (key_len->has_value()) {
    c.head_dim = **key_len;
  } else {
    if (c.n_heads <= 0 || c.dim % c.n_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          key("embedding_length"), " ", c.dim, " is not a multiple of head_count ", c.n_heads));
    }
    c.head_dim = c.dim / c.n_heads;
  }
  absl::StatusOr<std::optional<int>> value_len = OptionalInt(file, key("attention.value_length"));
  if (!value_len.ok()) return value_len.status();
  if (!deepseek2 && value_len->has_value() && **value_len != c.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(key("attention.value_length"), " ", **value_len,
                                                   " differs from the key length ", c.head_dim,
                                                   " (not supported)"));
  }

  absl::StatusOr<std::optional<int>> rope_dim = OptionalInt(file, key("rope.dimension_count"));
  if (!rope_dim.ok()) return rope_dim.status();
  c.rope_dim = rope_dim->value_or(c.head_dim);
  if (deepseek2) {
    if (absl::Status s = ReadLatentAttention(file, key, c); !s.ok()) return s;
  }

  absl::StatusOr<std::optional<int>> window = OptionalInt(file, key("attention.sliding_window"));
  if (!window.ok()) return window.status();
  c.sliding_window = window->value_or(0);

  absl::StatusOr<std::optional<int>> vocab = OptionalInt(file, key("vocab_size"));
  if (!vocab.ok()) return vocab.status();
  const GgufValue* tokens = file.FindMetadata("tokenizer.ggml.tokens");
  if (tokens == nullptr) return Missing("tokenizer.ggml.tokens");
  if (tokens->size() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError("tokenizer.ggml.tokens is too long");
  }
  c.vocab_size = static_cast<int>(tokens->size());
  if (vocab->has_value() && **vocab != c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(key("vocab_size"), " ", **vocab,
                                                   " differs from the ", c.vocab_size,
                                                   " entries of tokenizer.ggml.tokens"));
  }
  c.tied_embeddings = file.FindTensor("output.weight") == nullptr;

  // Architecture features, as llama.cpp's loader decides them: qwen2 requires Q/K/V
  // biases, qwen3 Q/K norms; llama takes biases when the file has them (all layers alike:
  // Model::FromParts reports a layer that lacks one) and Llama 3.x RoPE factors.
  if (c.architecture == "qwen2") {
    c.attention_qkv_bias = true;
  } else if (c.architecture == "qwen3" || c.architecture == "qwen3moe") {
    c.qk_norm = true;
  } else if (c.architecture == "llama") {
    c.attention_qkv_bias = file.FindTensor("blk.0.attn_q.bias") != nullptr;
    c.attention_output_bias = file.FindTensor("blk.0.attn_output.bias") != nullptr;
    absl::StatusOr<std::vector<float>> factors = RopeFreqFactors(file, c.rope_dim);
    if (!factors.ok()) return factors.status();
    c.rope_freq_factors = *std::move(factors);
  } else if (deepseek2) {
    if (absl::Status s = ReadDeepseekFfn(file, key, c); !s.ok()) return s;
  }
  if (absl::Status s = c.Validate(); !s.ok()) return s;
  return c;
}

absl::StatusOr<Vocabulary> VocabularyFromGguf(const GgufFile& file) {
  absl::StatusOr<std::string_view> model = RequiredString(file, "tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  Vocabulary v;
  // Defaults as llama.cpp's llama_vocab::load sets them per kind, before the keys.
  int32_t default_bos = 1, default_eos = 2, default_unk = 0;
  if (*model == "gpt2") {
    v.model = TokenizerModel::kBytePairEncoding;
    default_bos = default_eos = 11;
    default_unk = -1;
    v.add_space_prefix = false;
    const GgufValue* pre = file.FindMetadata("tokenizer.ggml.pre");
    if (pre == nullptr) {
      v.pre_tokenizer = "default";  // llama.cpp's choice (with a warning) for old files
    } else {
      const std::optional<std::string_view> name = pre->AsString();
      if (!name.has_value()) return WrongType("tokenizer.ggml.pre", *pre, "string");
      v.pre_tokenizer = std::string(*name);
    }
    absl::StatusOr<PreTokenizer> pre_tokenizer = PreTokenizer::Create(v.pre_tokenizer);
    if (!pre_tokenizer.ok()) return pre_tokenizer.status();
    v.add_bos = pre_tokenizer->ignore_merges();  // llama.cpp: true for Llama 3 only
    const GgufValue* merges = file.FindMetadata("tokenizer.ggml.merges");
    if (merges == nullptr) return Missing("tokenizer.ggml.merges");
    if (merges->type() != GgufType::kArray || merges->elem_type() != GgufType::kString) {
      return WrongType("tokenizer.ggml.merges", *merges, "array of string");
    }
    v.merges.reserve(merges->size());
    for (uint64_t i = 0; i < merges->size(); ++i) v.merges.emplace_back(*merges->StringAt(i));
  } else if (*model != "llama") {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer model \"", std::string(*model),
                                                   "\" is not supported (\"llama\", \"gpt2\")"));
  }
  const GgufValue* tokens = file.FindMetadata("tokenizer.ggml.tokens");
  if (tokens == nullptr) return Missing("tokenizer.ggml.tokens");
  if (tokens->type() != GgufType::kArray || tokens->elem_type() != GgufType::kString) {
    return WrongType("tokenizer.ggml.tokens", *tokens, "array of string");
  }
  const uint64_t n = tokens->size();
  absl::StatusOr<const GgufValue*> scores =
      OptionalArray(file, "tokenizer.ggml.scores", "array of float32", IsFloatType, n);
  if (!scores.ok()) return scores.status();
  absl::StatusOr<const GgufValue*> types =
      OptionalArray(file, "tokenizer.ggml.token_type", "array of int32", IsIntType, n);
  if (!types.ok()) return types.status();

  v.pieces.reserve(n);
  v.scores.reserve(n);
  v.kinds.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    v.pieces.emplace_back(*tokens->StringAt(i));
    v.scores.push_back(*scores == nullptr ? 0.0f : static_cast<float>(*(*scores)->FloatAt(i)));
    TokenKind kind = TokenKind::kNormal;  // also for 0 (GGUF "undefined")
    if (*types != nullptr) {
      const std::optional<int64_t> t = (*types)->IntAt(i);
      if (!t.has_value() || *t < 0 || *t > static_cast<int64_t>(TokenKind::kByte)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.ggml.token_type[", i, "] is not a valid token type"));
      }
      if (*t != 0) kind = static_cast<TokenKind>(*t);
    }
    v.kinds.push_back(kind);
  }
  for (auto [key, field, dflt] : {std::tuple<const char*, int32_t*, int32_t>{
                                      "tokenizer.ggml.bos_token_id", &v.bos_id, default_bos},
                                  {"tokenizer.ggml.eos_token_id", &v.eos_id, default_eos},
                                  {"tokenizer.ggml.unknown_token_id", &v.unk_id, default_unk}}) {
    absl::StatusOr<int32_t> id = TokenIdOr(file, key, dflt);
    if (!id.ok()) return id.status();
    *field = *id;
  }
  SetRstripTokens(file, v);
  absl::StatusOr<bool> add_bos = BoolOr(file, "tokenizer.ggml.add_bos_token", v.add_bos);
  if (!add_bos.ok()) return add_bos.status();
  v.add_bos = *add_bos;
  absl::StatusOr<bool> add_eos = BoolOr(file, "tokenizer.ggml.add_eos_token", v.add_eos);
  if (!add_eos.ok()) return add_eos.status();
  v.add_eos = *add_eos;
  absl::StatusOr<bool> add_space =
      BoolOr(file, "tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  if (!add_space.ok()) return add_space.status();
  v.add_space_prefix = *add_space;
  v.tokenizer_model = std::string(*model);
  for (auto [key, field] :
       {std::pair<const char*, std::string*>{"tokenizer.ggml.pre", &v.tokenizer_pre},
        {"tokenizer.chat_template", &v.chat_template}}) {
    absl::StatusOr<std::string> value = StringOr(file, key);
    if (!value.ok()) return value.status();
    *field = *std::move(value);
  }
  return v;
}

ModelWeights LlamaWeightsFromGguf(const GgufFile& file, const ModelConfig& config) {
  ModelWeights w;
  w.token_embedding = View(file, "token_embd.weight");
  w.output_norm = View(file, "output_norm.weight");
  w.output =
      file.FindTensor("output.weight") != nullptr ? View(file, "output.weight") : w.token_embedding;
  const int n_layers = config.n_layers;
  w.layers.resize(n_layers > 0 ? n_layers : 0);
  for (int l = 0; l < n_layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    LayerWeights& L = w.layers[l];
    L.attn_norm = View(file, p + "attn_norm.weight");
    L.wq = View(file, p + "attn_q.weight");
    if (config.mla()) {
      L.wq_a = View(file, p + "attn_q_a.weight");
      L.q_a_norm = View(file, p + "attn_q_a_norm.weight");
      L.wq_b = View(file, p + "attn_q_b.weight");
      L.wkv_a = View(file, p + "attn_kv_a_mqa.weight");
      L.kv_a_norm = View(file, p + "attn_kv_a_norm.weight");
      L.wk_b = View(file, p + "attn_k_b.weight");
      L.wv_b = View(file, p + "attn_v_b.weight");
    }
    L.wk = View(file, p + "attn_k.weight");
    L.wv = View(file, p + "attn_v.weight");
    L.wo = View(file, p + "attn_output.weight");
    L.ffn_norm = View(file, p + "ffn_norm.weight");
    L.w_gate = View(file, p + "ffn_gate.weight");
    L.w_up = View(file, p + "ffn_up.weight");
    L.w_down = View(file, p + "ffn_down.weight");
    if (config.moe()) {
      L.expert_probs_bias = View(file, p + "exp_probs_b.bias");
      L.shared_gate = View(file, p + "ffn_gate_shexp.weight");
      L.shared_up = View(file, p + "ffn_up_shexp.weight");
      L.shared_down = View(file, p + "ffn_down_shexp.weight");
      L.router = View(file, p + "ffn_gate_inp.weight");
      L.expert_gate = ExpertViews(file, p + "ffn_gate_exps.weight", config.n_experts);
      L.expert_up = ExpertViews(file, p + "ffn_up_exps.weight", config.n_experts);
      L.expert_down = ExpertViews(file, p + "ffn_down_exps.weight", config.n_experts);
    }
    if (config.attention_qkv_bias) {
      L.bq = View(file, p + "attn_q.bias");
      L.bk = View(file, p + "attn_k.bias");
      L.bv = View(file, p + "attn_v.bias");
    }
    if (config.attention_output_bias) L.bo = View(file, p + "attn_output.bias");
    if (config.qk_norm) {
      L.q_norm = View(file, p + "attn_q_norm.weight");
      L.k_norm = View(file, p + "attn_k_norm.weight");
    }
  }
  return w;
}

absl::StatusOr<std::unique_ptr<Model>> ModelFromGguf(const GgufFile& file,
                                                     std::shared_ptr<const void> storage) {
  absl::StatusOr<ModelConfig> config = LlamaConfigFromGguf(file);
  if (!config.ok()) return config.status();
  absl::StatusOr<Vocabulary> vocab = VocabularyFromGguf(file);
  if (!vocab.ok()) return vocab.status();
  if (absl::Status s = CheckExpertCounts(file, *config); !s.ok()) return s;
  ModelWeights weights = LlamaWeightsFromGguf(file, *config);
  return Model::FromParts(*std::move(config), std::move(weights), *std::move(vocab),
                          std::move(storage));
}

}  // namespace kvserve::model
