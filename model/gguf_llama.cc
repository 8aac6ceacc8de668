#include "model/gguf_llama.h"

#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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

}  // namespace

absl::StatusOr<ModelConfig> LlamaConfigFromGguf(const GgufFile& file) {
  absl::StatusOr<std::string_view> arch = RequiredString(file, "general.architecture");
  if (!arch.ok()) return arch.status();
  if (*arch != "llama") {
    return absl::InvalidArgumentError(absl::StrCat("architecture \"", std::string(*arch),
                                                   "\" is not supported (only \"llama\")"));
  }
  ModelConfig c;
  c.architecture = "llama";
  c.rope_style = RopeStyle::kAdjacentPairs;
  for (auto [key, field] : {std::pair<const char*, int*>{"llama.embedding_length", &c.dim},
                            {"llama.block_count", &c.n_layers},
                            {"llama.attention.head_count", &c.n_heads},
                            {"llama.feed_forward_length", &c.ffn_dim},
                            {"llama.context_length", &c.context_length}}) {
    absl::StatusOr<int> v = RequiredInt(file, key);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  absl::StatusOr<std::optional<float>> eps =
      OptionalFloat(file, "llama.attention.layer_norm_rms_epsilon");
  if (!eps.ok()) return eps.status();
  if (!eps->has_value()) return Missing("llama.attention.layer_norm_rms_epsilon");
  c.rms_eps = **eps;

  absl::StatusOr<std::optional<float>> base = OptionalFloat(file, "llama.rope.freq_base");
  if (!base.ok()) return base.status();
  c.rope_base = base->value_or(10000.0f);

  absl::StatusOr<std::optional<int>> kv = OptionalInt(file, "llama.attention.head_count_kv");
  if (!kv.ok()) return kv.status();
  c.n_kv_heads = kv->value_or(c.n_heads);

  absl::StatusOr<std::optional<int>> key_len = OptionalInt(file, "llama.attention.key_length");
  if (!key_len.ok()) return key_len.status();
  if (key_len->has_value()) {
    c.head_dim = **key_len;
  } else {
    if (c.n_heads <= 0 || c.dim % c.n_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "llama.embedding_length ", c.dim, " is not a multiple of head_count ", c.n_heads));
    }
    c.head_dim = c.dim / c.n_heads;
  }
  absl::StatusOr<std::optional<int>> value_len = OptionalInt(file, "llama.attention.value_length");
  if (!value_len.ok()) return value_len.status();
  if (value_len->has_value() && **value_len != c.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("llama.attention.value_length ", **value_len,
                                                   " differs from the key length ", c.head_dim,
                                                   " (not supported)"));
  }

  absl::StatusOr<std::optional<int>> rope_dim = OptionalInt(file, "llama.rope.dimension_count");
  if (!rope_dim.ok()) return rope_dim.status();
  c.rope_dim = rope_dim->value_or(c.head_dim);

  absl::StatusOr<std::optional<int>> vocab = OptionalInt(file, "llama.vocab_size");
  if (!vocab.ok()) return vocab.status();
  const GgufValue* tokens = file.FindMetadata("tokenizer.ggml.tokens");
  if (tokens == nullptr) return Missing("tokenizer.ggml.tokens");
  if (tokens->size() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError("tokenizer.ggml.tokens is too long");
  }
  c.vocab_size = static_cast<int>(tokens->size());
  if (vocab->has_value() && **vocab != c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("llama.vocab_size ", **vocab,
                                                   " differs from the ", c.vocab_size,
                                                   " entries of tokenizer.ggml.tokens"));
  }
  c.tied_embeddings = file.FindTensor("output.weight") == nullptr;
  if (absl::Status s = c.Validate(); !s.ok()) return s;
  return c;
}

absl::StatusOr<Vocabulary> VocabularyFromGguf(const GgufFile& file) {
  absl::StatusOr<std::string_view> model = RequiredString(file, "tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model != "llama") {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer model \"", std::string(*model),
                                                   "\" is not supported (only \"llama\")"));
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

  Vocabulary v;
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
  for (auto [key, field, dflt] :
       {std::tuple<const char*, int32_t*, int32_t>{"tokenizer.ggml.bos_token_id", &v.bos_id, 1},
        {"tokenizer.ggml.eos_token_id", &v.eos_id, 2},
        {"tokenizer.ggml.unknown_token_id", &v.unk_id, 0}}) {
    absl::StatusOr<int32_t> id = TokenIdOr(file, key, dflt);
    if (!id.ok()) return id.status();
    *field = *id;
  }
  absl::StatusOr<bool> add_bos = BoolOr(file, "tokenizer.ggml.add_bos_token", true);
  if (!add_bos.ok()) return add_bos.status();
  v.add_bos = *add_bos;
  absl::StatusOr<bool> add_space = BoolOr(file, "tokenizer.ggml.add_space_prefix", true);
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

ModelWeights LlamaWeightsFromGguf(const GgufFile& file, int n_layers) {
  ModelWeights w;
  w.token_embedding = View(file, "token_embd.weight");
  w.output_norm = View(file, "output_norm.weight");
  w.output =
      file.FindTensor("output.weight") != nullptr ? View(file, "output.weight") : w.token_embedding;
  w.layers.resize(n_layers > 0 ? n_layers : 0);
  for (int l = 0; l < n_layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    LayerWeights& L = w.layers[l];
    L.attn_norm = View(file, p + "attn_norm.weight");
    L.wq = View(file, p + "attn_q.weight");
    L.wk = View(file, p + "attn_k.weight");
    L.wv = View(file, p + "attn_v.weight");
    L.wo = View(file, p + "attn_output.weight");
    L.ffn_norm = View(file, p + "ffn_norm.weight");
    L.w_gate = View(file, p + "ffn_gate.weight");
    L.w_up = View(file, p + "ffn_up.weight");
    L.w_down = View(file, p + "ffn_down.weight");
  }
  return w;
}

absl::StatusOr<std::unique_ptr<Model>> ModelFromGguf(const GgufFile& file,
                                                     std::shared_ptr<const void> storage) {
  absl::StatusOr<ModelConfig> config = LlamaConfigFromGguf(file);
  if (!config.ok()) return config.status();
  absl::StatusOr<Vocabulary> vocab = VocabularyFromGguf(file);
  if (!vocab.ok()) return vocab.status();
  ModelWeights weights = LlamaWeightsFromGguf(file, config->n_layers);
  return Model::FromParts(*std::move(config), std::move(weights), *std::move(vocab),
                          std::move(storage));
}

}  // namespace kvserve::model
