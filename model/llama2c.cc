#include "model/llama2c.h"

#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/byte_reader.h"

namespace kvserve::model {
namespace {

absl::Status Invalid(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

// Hands out consecutive f32 arrays of the checkpoint; sizes were checked up front.
class F32Cursor {
 public:
  explicit F32Cursor(const float* p) : p_(p) {}
  const float* Take(uint64_t n) {
    const float* out = p_;
    p_ += n;
    return out;
  }

 private:
  const float* p_;
};

// Row `l` of a stacked [L, rows, cols] f32 array.
TensorView Layer(const float* base, int l, int64_t rows, int64_t cols) {
  return TensorView{DType::kF32, base + static_cast<uint64_t>(l) * rows * cols, rows, cols};
}

bool IsByteToken(std::string_view p) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return p.size() == 6 && p.substr(0, 3) == "<0x" && hex(p[3]) && hex(p[4]) && p[5] == '>';
}

}  // namespace

absl::StatusOr<Llama2cCheckpoint> ParseLlama2cCheckpoint(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "ak42", 4) == 0) {
    return Invalid(
        "llama2.c checkpoint in the versioned \"ak42\" export format is not "
        "supported (only the legacy run.c format)");
  }
  int32_t h[7];
  for (int32_t& v : h) {
    if (!r.Read(&v)) return Invalid("llama2.c checkpoint: file ends inside the 28-byte header");
  }
  const int32_t dim = h[0], hidden_dim = h[1], n_layers = h[2], n_heads = h[3], n_kv_heads = h[4],
                vocab_signed = h[5], seq_len = h[6];
  if (n_heads <= 0 || dim <= 0 || dim % n_heads != 0) {
    return Invalid(absl::StrCat("llama2.c checkpoint: dim ", dim,
                                " is not a positive multiple of n_heads ", n_heads));
  }
  if (vocab_signed == std::numeric_limits<int32_t>::min()) {
    return Invalid("llama2.c checkpoint: vocab_size is out of range");
  }
  Llama2cCheckpoint ck;
  ModelConfig& c = ck.config;
  c.architecture = "llama";
  c.dim = dim;
  c.ffn_dim = hidden_dim;
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = dim / n_heads;
  c.vocab_size = vocab_signed < 0 ? -vocab_signed : vocab_signed;
  c.context_length = seq_len;
  c.rms_eps = 1e-5f;
  c.rope_base = 10000.0f;
  c.rope_dim = c.head_dim;
  c.rope_style = RopeStyle::kAdjacentPairs;
  c.tied_embeddings = vocab_signed > 0;
  // Validate caps every dimension, so the sizes below fit comfortably in uint64.
  if (absl::Status s = c.Validate(); !s.ok()) {
    return Invalid(absl::StrCat("llama2.c checkpoint header: ", s.message()));
  }
  const uint64_t D = dim, H = hidden_dim, L = n_layers, V = c.vocab_size, KV = c.kv_dim();
  const uint64_t freq_floats = 2 * ((static_cast<uint64_t>(seq_len) * c.head_dim) / 2);
  const uint64_t floats = V * D + L * D + L * D * D + 2 * L * KV * D + L * D * D + L * D +
                          3 * L * H * D + D + freq_floats + (c.tied_embeddings ? 0 : V * D);
  const uint64_t expected = 28 + 4 * floats;
  if (bytes.size() != expected) {
    return Invalid(absl::StrCat(
        "llama2.c checkpoint has ", bytes.size(), " bytes, its header (dim ", dim, ", hidden_dim ",
        hidden_dim, ", n_layers ", n_layers, ", n_heads ", n_heads, ", n_kv_heads ", n_kv_heads,
        ", vocab_size ", vocab_signed, ", seq_len ", seq_len, ") implies ", expected));
  }
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(float) != 0) {
    return Invalid("llama2.c checkpoint bytes are not 4-byte aligned in memory");
  }

  F32Cursor p(reinterpret_cast<const float*>(bytes.data() + 28));
  const float* token_embedding = p.Take(V * D);
  const float* rms_att = p.Take(L * D);
  const float* wq = p.Take(L * D * D);
  const float* wk = p.Take(L * KV * D);
  const float* wv = p.Take(L * KV * D);
  const float* wo = p.Take(L * D * D);
  const float* rms_ffn = p.Take(L * D);
  const float* w1 = p.Take(L * H * D);
  const float* w2 = p.Take(L * D * H);
  const float* w3 = p.Take(L * H * D);
  const float* rms_final = p.Take(D);
  p.Take(freq_floats);
  const float* wcls = c.tied_embeddings ? token_embedding : p.Take(V * D);

  ModelWeights& w = ck.weights;
  w.token_embedding = TensorView{DType::kF32, token_embedding, c.vocab_size, dim};
  w.output_norm = TensorView{DType::kF32, rms_final, 1, dim};
  w.output = TensorView{DType::kF32, wcls, c.vocab_size, dim};
  w.layers.resize(n_layers);
  for (int l = 0; l < n_layers; ++l) {
    LayerWeights& Lw = w.layers[l];
    Lw.attn_norm = Layer(rms_att, l, 1, dim);
    Lw.wq = Layer(wq, l, dim, dim);
    Lw.wk = Layer(wk, l, c.kv_dim(), dim);
    Lw.wv = Layer(wv, l, c.kv_dim(), dim);
    Lw.wo = Layer(wo, l, dim, dim);
    Lw.ffn_norm = Layer(rms_ffn, l, 1, dim);
    Lw.w_gate = Layer(w1, l, hidden_dim, dim);
    Lw.w_down = Layer(w2, l, dim, hidden_dim);
    Lw.w_up = Layer(w3, l, hidden_dim, dim);
  }
  return ck;
}

absl::StatusOr<Vocabulary> ParseLlama2cTokenizer(std::span<const uint8_t> bytes, int vocab_size) {
  ByteReader r(bytes);
  int32_t max_token_length = 0;
  if (!r.Read(&max_token_length)) return Invalid("llama2.c tokenizer: file ends inside the header");
  if (vocab_size <= 0) return Invalid("llama2.c tokenizer: vocab_size must be positive");
  // Each token takes at least 8 bytes: bound the count before reserving.
  if (static_cast<uint64_t>(vocab_size) > r.remaining() / 8) {
    return Invalid(
        absl::StrCat("llama2.c tokenizer: file is too short for ", vocab_size, " tokens"));
  }
  Vocabulary v;
  v.pieces.reserve(vocab_size);
  v.scores.reserve(vocab_size);
  v.kinds.reserve(vocab_size);
  for (int i = 0; i < vocab_size; ++i) {
    float score = 0;
    int32_t len = 0;
    std::string_view piece;
    if (!r.Read(&score) || !r.Read(&len)) {
      return Invalid(absl::StrCat("llama2.c tokenizer: file ends inside token ", i));
    }
    if (len < 0 || !r.ReadString(static_cast<uint64_t>(len), &piece)) {
      return Invalid(absl::StrCat("llama2.c tokenizer: token ", i, " length ", len,
                                  " extends past end of file"));
    }
    // llama2.c's exporter writes BOS/EOS as "\n<s>\n" / "\n</s>\n" and spaces as ' '.
    std::string text;
    for (char ch : piece) {
      if (ch == ' ') {
        text += "\xe2\x96\x81";
      } else {
        text += ch;
      }
    }
    if (i == 1 && text == "\n<s>\n") text = "<s>";
    if (i == 2 && text == "\n</s>\n") text = "</s>";
    TokenKind kind = TokenKind::kNormal;
    if (i == 0 && text == "<unk>") kind = TokenKind::kUnknown;
    if ((i == 1 && text == "<s>") || (i == 2 && text == "</s>")) kind = TokenKind::kControl;
    if (IsByteToken(text)) kind = TokenKind::kByte;
    v.pieces.push_back(std::move(text));
    v.scores.push_back(score);
    v.kinds.push_back(kind);
  }
  if (r.remaining() != 0) {
    return Invalid(absl::StrCat("llama2.c tokenizer: ", r.remaining(), " bytes left after ",
                                vocab_size, " tokens (a tokenizer for another vocabulary size?)"));
  }
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

}  // namespace kvserve::model
