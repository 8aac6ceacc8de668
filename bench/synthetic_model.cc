#include "bench/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numbers>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/gguf_writer.h"
#include "model/quant.h"

namespace kvserve::bench {
namespace {

using model::DType;
using model::GgufByteSink;
using model::GgufWriter;
using model::ModelConfig;

model::ModelConfig Shape(int dim, int layers, int heads, int kv_heads, int ffn, int vocab,
                         int context, bool tied) {
  ModelConfig c;
  c.architecture = "llama";
  c.dim = dim;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = dim / heads;
  c.ffn_dim = ffn;
  c.vocab_size = vocab;
  c.context_length = context;
  c.rms_eps = 1e-5f;
  c.rope_base = 10000.0f;
  c.rope_dim = c.head_dim;
  c.rope_style = model::RopeStyle::kAdjacentPairs;
  c.tied_embeddings = tied;
  return c;
}

// splitmix64: seeds one stream per tensor so tensors do not depend on write order.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t HashName(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char ch : s) h = (h ^ static_cast<uint8_t>(ch)) * 0x100000001b3ull;
  return h;
}

// Approximately normal values: the sum of four 16-bit uniforms from one xorshift64*
// draw (Irwin-Hall, variance 1/3 before scaling). Cheap enough for a billion weights.
class NormalStream {
 public:
  NormalStream(uint64_t seed, float stddev)
      : state_(SplitMix64(seed) | 1), scale_(stddev * std::sqrt(3.0f) / 65536.0f) {}
  float Next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    const uint64_t r = state_ * 0x2545f4914f6cdd1dull;
    const uint32_t sum = static_cast<uint32_t>(r & 0xffff) +
                         static_cast<uint32_t>((r >> 16) & 0xffff) +
                         static_cast<uint32_t>((r >> 32) & 0xffff) + static_cast<uint32_t>(r >> 48);
    // sum / 65536 is in [0, 4) with mean ~2: center it.
    return (static_cast<float>(sum) + 2.0f - 131072.0f) * scale_;
  }

 private:
  uint64_t state_;
  float scale_;
};

// Replaces `out` with `values` encoded as `dtype` (model::EncodeRow).
void EncodeRow(const std::vector<float>& values, DType dtype, std::vector<uint8_t>& out) {
  out.resize(model::DTypeBytes(dtype, values.size()));
  model::EncodeRow(dtype, values, out.data());
}

// A [rows, cols] matrix, or with experts > 0 the 3-D [experts][rows][cols] tensor of a
// mixture-of-experts layer (GGUF dims {cols, rows, experts}).
absl::Status AddMatrix(GgufWriter& w, const std::string& name, DType dtype, int64_t rows,
                       int64_t cols, uint64_t seed, float stddev, int64_t experts = 0) {
  std::vector<uint64_t> dims = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)};
  if (experts > 0) dims.push_back(static_cast<uint64_t>(experts));
  const int64_t all_rows = rows * std::max<int64_t>(experts, 1);
  return w.AddTensor(name, dtype, std::move(dims), [=](GgufByteSink& sink) {
    NormalStream rng(seed ^ HashName(name), stddev);
    std::vector<float> row(static_cast<size_t>(cols));  // [cols]
    std::vector<uint8_t> bytes;
    for (int64_t r = 0; r < all_rows; ++r) {
      for (float& v : row) v = rng.Next();
      EncodeRow(row, dtype, bytes);
      if (absl::Status s = sink.Append(bytes.data(), bytes.size()); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
}

// A [n] f32 vector of mean + N(0, stddev^2) values (biases, Q/K norm gains).
absl::Status AddVector(GgufWriter& w, const std::string& name, int64_t n, uint64_t seed, float mean,
                       float stddev) {
  return w.AddTensor(name, DType::kF32, {static_cast<uint64_t>(n)}, [=](GgufByteSink& sink) {
    NormalStream rng(seed ^ HashName(name), stddev);
    std::vector<float> values(static_cast<size_t>(n));  // [n]
    for (float& v : values) v = mean + rng.Next();
    return sink.Append(values.data(), values.size() * sizeof(float));
  });
}

// A [dim] f32 RMSNorm gain of ones.
absl::Status AddNorm(GgufWriter& w, const std::string& name, int64_t dim) {
  return w.AddTensor(name, DType::kF32, {static_cast<uint64_t>(dim)}, [dim](GgufByteSink& sink) {
    const std::vector<float> ones(static_cast<size_t>(dim), 1.0f);  // [dim]
    return sink.Append(ones.data(), ones.size() * sizeof(float));
  });
}

// llama.cpp's general.file_type (LLAMA_FTYPE_*).
uint32_t FileType(const SyntheticModelOptions& options) {
  if (options.mix == QuantMix::kQ4_K_M) return 15;  // MOSTLY_Q4_K_M
  switch (options.dtype) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ8_0:
      return 7;
    case DType::kQ4_0:
      return 2;
    case DType::kQ5_0:
      return 8;  // MOSTLY_Q5_0
    case DType::kQ5_1:
      return 9;  // MOSTLY_Q5_1
    case DType::kQ4_K:
      return 14;  // MOSTLY_Q4_K_S: all q4_K
    case DType::kQ5_K:
      return 16;  // MOSTLY_Q5_K_S: all q5_K
    case DType::kQ6_K:
      return 18;
    case DType::kBF16:
      return 32;
  }
  return 0;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third
// one between them.
bool UseMoreBits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// Makes `c` a deepseek2 shape with multi-head latent attention of these widths.
void SetLatentAttention(ModelConfig& c, int kv_lora_rank, int q_lora_rank, int qk_nope,
                        int rope_dim, int v_head_dim) {
  c.architecture = "deepseek2";
  c.rope_style = model::RopeStyle::kAdjacentPairs;
  c.n_kv_heads = 1;
  c.kv_lora_rank = kv_lora_rank;
  c.q_lora_rank = q_lora_rank;
  c.head_dim = qk_nope + rope_dim;
  c.rope_dim = rope_dim;
  c.v_head_dim = v_head_dim;
}

// Gives `c` (a dense shape) DeepSeek-V2's mixture of experts: a dense first layer of the
// shape's FFN size (when there are two layers or more), then kDefaultExperts experts of
// half that size, kDefaultExpertsUsed per token, and 2 shared experts; softmax gating,
// unnormalized weights.
void SetDeepseekExperts(ModelConfig& c) {
  c.n_dense_layers = c.n_layers > 1 ? 1 : 0;
  c.dense_ffn_dim = c.n_dense_layers > 0 ? c.ffn_dim : 0;
  c.ffn_dim /= 2;
  c.n_experts = kDefaultExperts;
  c.n_experts_used = kDefaultExpertsUsed;
  c.n_shared_experts = 2;
  c.expert_weights_norm = false;
}

// The latent attention tensors of layer `l` (llama.cpp's deepseek2 names and shapes; the
// 3-D attn_k_b [n_heads][kv_lora_rank][qk_nope] and attn_v_b [n_heads][v_head][kv_lora_rank]
// written as one matrix of stacked heads, the same bytes). `matrix(tensor, layer, rows,
// cols, experts)` adds a matrix.
template <typename AddMatrixFn>
absl::Status LatentAttentionTensors(const ModelConfig& c, int l, AddMatrixFn& matrix,
                                    GgufWriter& w) {
  const std::string p = absl::StrCat("blk.", l, ".");
  const int r = c.kv_lora_rank, nope = c.head_dim - c.rope_dim;
  absl::Status s;
  if (c.q_lora_rank > 0) {
    s = matrix("attn_q_a", l, c.q_lora_rank, c.dim, 0);
    if (s.ok()) s = AddNorm(w, p + "attn_q_a_norm.weight", c.q_lora_rank);
    if (s.ok()) s = matrix("attn_q_b", l, c.q_dim(), c.q_lora_rank, 0);
  } else {
    s = matrix("attn_q", l, c.q_dim(), c.dim, 0);
  }
  if (s.ok()) s = matrix("attn_kv_a_mqa", l, r + c.rope_dim, c.dim, 0);
  if (s.ok()) s = AddNorm(w, p + "attn_kv_a_norm.weight", r);
  if (s.ok()) s = matrix("attn_k_b", l, r, nope, c.n_heads);
  if (s.ok()) s = matrix("attn_v_b", l, c.v_head_dim, r, c.n_heads);
  return s;
}

}  // namespace

std::vector<std::string> PresetNames() {
  return {"tiny",  "s110m",      "smol135m", "tl1b",
          "l3-1b", "q3moe-mini", "youtu2b",  "deepseek-v2-lite"};
}

absl::StatusOr<model::ModelConfig> PresetConfig(std::string_view name) {
  if (name == "tiny") return Shape(64, 2, 4, 2, 128, 512, 256, false);
  if (name == "s110m") return Shape(768, 12, 12, 12, 2048, 32000, 2048, false);
  if (name == "smol135m") return Shape(576, 30, 9, 3, 1536, 49152, 2048, true);
  if (name == "tl1b") return Shape(2048, 22, 32, 4, 5632, 32000, 2048, false);
  if (name == "l3-1b") {
    ModelConfig c = Shape(2048, 16, 32, 8, 8192, 128256, 8192, true);
    c.rope_base = 500000.0f;
    c.rope_freq_factors = Llama3RopeFactors(c.rope_base, c.rope_dim, 32.0f);
    return c;
  }
  if (name == "q3moe-mini") {
    ModelConfig c = Shape(512, 4, 8, 1, 768, 32000, 4096, false);
    c.head_dim = c.rope_dim = 128;
    c.rope_base = 1000000.0f;
    c.rms_eps = 1e-6f;
    c.n_experts = 128;
    c.n_experts_used = 8;
    return c;
  }
  if (name == "youtu2b") {
    ModelConfig c = Shape(2048, 32, 16, 1, 6144, 128256, 8192, true);
    c.rope_base = 1600000.0f;
    c.rms_eps = 1e-6f;
    SetLatentAttention(c, /*kv_lora_rank=*/512, /*q_lora_rank=*/1536, /*qk_nope=*/128,
                       /*rope_dim=*/64, /*v_head_dim=*/128);
    return c;
  }
  if (name == "deepseek-v2-lite") {
    ModelConfig c = Shape(2048, 27, 16, 1, 10944, 102400, 4096, false);
    c.rms_eps = 1e-6f;
    SetLatentAttention(c, /*kv_lora_rank=*/512, /*q_lora_rank=*/0, /*qk_nope=*/128,
                       /*rope_dim=*/64, /*v_head_dim=*/128);
    c.n_dense_layers = 1;
    c.dense_ffn_dim = 10944;
    c.ffn_dim = 1408;
    c.n_experts = 64;
    c.n_experts_used = 6;
    c.n_shared_experts = 2;
    c.expert_weights_norm = false;
    return c;
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown preset '", std::string(name),
      "' (tiny, s110m, smol135m, tl1b, l3-1b, q3moe-mini, youtu2b, deepseek-v2-lite)"));
}

absl::Status ApplyArchitecture(std::string_view arch, model::ModelConfig& config) {
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "qwen3moe" &&
      arch != "deepseek2") {
    return absl::InvalidArgumentError(absl::StrCat("unknown architecture '", std::string(arch),
                                                   "' (llama, qwen2, qwen3, qwen3moe, deepseek2)"));
  }
  if (config.mla() != (arch == "deepseek2")) {
    if (config.mla()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the shape has latent attention: --arch deepseek2, not '", std::string(arch), "'"));
    }
    if (config.moe()) {
      return absl::InvalidArgumentError(
          "the shape has qwen3moe's experts: --arch qwen3moe, not 'deepseek2' (deepseek2 "
          "shapes with experts: the tiny preset, deepseek-v2-lite)");
    }
    // A head of head_dim becomes qk_nope = head_dim plus rope_dim = head_dim / 2; the
    // latent and the compressed query are dim / 2 wide.
    SetLatentAttention(config, config.dim / 2, config.dim / 2, config.head_dim, config.head_dim / 2,
                       config.head_dim);
    SetDeepseekExperts(config);
  }
  if (arch == "deepseek2") return config.Validate();
  if (arch == "qwen3moe") {
    if (!config.moe()) {
      config.n_experts = kDefaultExperts;
      config.n_experts_used = kDefaultExpertsUsed;
    }
  } else if (config.moe()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shape has experts: --arch qwen3moe, not '", std::string(arch), "'"));
  }
  if (arch == "llama") return absl::OkStatus();
  config.architecture = std::string(arch);
  config.rope_style = model::RopeStyle::kRotateHalves;
  if (arch == "qwen2") {
    if (config.q_dim() != config.dim) {
      return absl::InvalidArgumentError("qwen2 needs n_heads * head_dim == dim");
    }
    config.attention_qkv_bias = true;
  } else {
    config.qk_norm = true;  // qwen3 and qwen3moe
  }
  return absl::OkStatus();
}

std::vector<float> Llama3RopeFactors(float rope_base, int rope_dim, float factor,
                                     float low_freq_factor, float high_freq_factor,
                                     int original_context) {
  const double low_freq_wavelen = original_context / low_freq_factor;
  const double high_freq_wavelen = original_context / high_freq_factor;
  std::vector<float> factors;
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double freq = std::pow(static_cast<double>(rope_base), -2.0 * i / rope_dim);
    const double wavelen = 2.0 * std::numbers::pi / freq;
    if (wavelen < high_freq_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      factors.push_back(factor);
    } else {
      const double smooth =
          (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      factors.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return factors;
}

absl::StatusOr<model::Vocabulary> SyntheticVocabulary(int vocab_size) {
  constexpr int kMinVocab = 3 + 256 + 1;
  if (vocab_size < kMinVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size ", vocab_size, " is below the minimum ", kMinVocab));
  }
  model::Vocabulary v;
  const size_t n = static_cast<size_t>(vocab_size);
  v.pieces.reserve(n);
  v.scores.reserve(n);
  v.kinds.reserve(n);
  auto add = [&v](std::string piece, float score, model::TokenKind kind) {
    v.pieces.push_back(std::move(piece));
    v.scores.push_back(score);
    v.kinds.push_back(kind);
  };
  add("<unk>", 0.0f, model::TokenKind::kUnknown);
  add("<s>", 0.0f, model::TokenKind::kControl);
  add("</s>", 0.0f, model::TokenKind::kControl);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    add(buf, 0.0f, model::TokenKind::kByte);
  }
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = true;

  // Normal pieces, in merge priority order. Each longer piece is an earlier piece plus one
  // character, so it is reachable by merges.
  const std::string kSpace = "\xe2\x96\x81";  // U+2581
  std::vector<std::string> normal;
  normal.push_back(kSpace);
  std::string singles;
  for (char c = 'a'; c <= 'z'; ++c) singles += c;
  for (char c = 'A'; c <= 'Z'; ++c) singles += c;
  for (char c = '0'; c <= '9'; ++c) singles += c;
  singles += ".,!?'\"-:;()";
  for (char c : singles) normal.push_back(std::string(1, c));
  for (char c : singles) normal.push_back(kSpace + c);
  std::vector<std::string> level = {""};
  while (static_cast<size_t>(v.size()) + normal.size() < n) {
    std::vector<std::string> next;
    for (const std::string& prefix : level) {
      for (char c = 'a'; c <= 'z'; ++c) next.push_back(prefix + c);
    }
    if (next.front().size() >= 2) {
      for (const std::string& s : next) {
        normal.push_back(s);
        normal.push_back(kSpace + s);
        if (static_cast<size_t>(v.size()) + normal.size() >= n) break;
      }
    }
    level = std::move(next);
  }
  for (size_t i = 0; static_cast<size_t>(v.size()) < n; ++i) {
    add(normal[i], -static_cast<float>(i), model::TokenKind::kNormal);
  }
  return v;
}

DType MatrixDType(const SyntheticModelOptions& options, std::string_view tensor, int layer) {
  // The router stays f32, as llama.cpp's converter and quantizer keep it.
  if (tensor == "ffn_gate_inp") return DType::kF32;
  if (options.mix == QuantMix::kUniform) return options.dtype;
  const int n = options.config.n_layers;
  const bool is_output =
      tensor == "output" || (tensor == "token_embd" && options.config.tied_embeddings);
  if (is_output) return DType::kQ6_K;
  if ((tensor == "attn_v" || tensor == "ffn_down" || tensor == "ffn_down_exps") &&
      UseMoreBits(layer, n)) {
    return DType::kQ6_K;
  }
  return DType::kQ4_K;
}

absl::Status WriteSyntheticModel(const SyntheticModelOptions& options, const std::string& path) {
  const ModelConfig& c = options.config;
  if (absl::Status s = c.Validate(); !s.ok()) return s;
  const bool llama = c.architecture == "llama";
  const bool moe = c.architecture == "qwen3moe";
  const bool mla = c.architecture == "deepseek2";
  if (!(llama || moe || mla || c.architecture == "qwen2" || c.architecture == "qwen3") ||
      (c.rope_style == model::RopeStyle::kAdjacentPairs) != (llama || mla)) {
    return absl::InvalidArgumentError(
        "synthetic models are llama or deepseek2 (adjacent-pair RoPE), qwen2, qwen3 or qwen3moe "
        "(rotate halves)");
  }
  // What llama.cpp reads per architecture (see model/gguf_llama.h).
  if (mla != c.mla() || (mla && (c.attention_qkv_bias || c.qk_norm)) ||
      (c.architecture == "qwen2") != (c.attention_qkv_bias && !llama) ||
      (c.architecture == "qwen3" || moe) != c.qk_norm || (moe && !c.moe()) ||
      (!moe && !mla && c.moe()) || (!mla && !c.PlainExpertRouting()) ||
      (!llama && c.attention_output_bias) || (!llama && !c.rope_freq_factors.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the config's features do not match what llama.cpp reads for ", c.architecture));
  }
  // YaRN as a file declares it: llama.cpp's ext_factor and betas (no keys for them), a log
  // multiplier only for deepseek2.
  const model::ModelConfig defaults;
  const bool yarn = c.yarn_ext_factor != 0.0f;
  if ((yarn && c.yarn_ext_factor != 1.0f) || c.yarn_beta_fast != defaults.yarn_beta_fast ||
      c.yarn_beta_slow != defaults.yarn_beta_slow ||
      (c.yarn_log_multiplier != 0.0f && !(yarn && mla))) {
    return absl::InvalidArgumentError(
        "YaRN in a file is yarn_ext_factor 1 with the default betas, and a yarn_log_multiplier "
        "only for deepseek2");
  }
  // Every matrix row (dim, q_dim or ffn_dim long) must be a whole number of blocks.
  for (std::string_view t : {"token_embd", "attn_v", "ffn_down", "attn_q", "output"}) {
    for (int layer = 0; layer < c.n_layers; ++layer) {
      const int block = model::DTypeBlockElems(MatrixDType(options, t, layer));
      if (c.dim % block != 0 || c.q_dim() % block != 0 || c.ffn_dim % block != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(model::DTypeName(MatrixDType(options, t, layer))),
                         " needs dim, q_dim and ffn_dim multiples of ", block));
      }
    }
  }
  absl::StatusOr<model::Vocabulary> vocab = SyntheticVocabulary(c.vocab_size);
  if (!vocab.ok()) return vocab.status();

  GgufWriter w;
  w.SetString("general.architecture", c.architecture);
  w.SetString("general.name", options.name);
  w.SetUint32("general.file_type", FileType(options));
  w.SetUint32("general.quantization_version", 2);
  const std::string a = c.architecture + ".";
  w.SetUint32(a + "context_length", static_cast<uint32_t>(c.context_length));
  w.SetUint32(a + "embedding_length", static_cast<uint32_t>(c.dim));
  w.SetUint32(a + "block_count", static_cast<uint32_t>(c.n_layers));
  // deepseek2 with experts: the leading dense layers' FFN size (the experts' below).
  w.SetUint32(a + "feed_forward_length",
              static_cast<uint32_t>(mla && c.n_dense_layers > 0 ? c.dense_ffn_dim : c.ffn_dim));
  w.SetUint32(a + "attention.head_count", static_cast<uint32_t>(c.n_heads));
  w.SetUint32(a + "attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  // With latent attention key/value_length are the latent's widths (the cached row), the
  // _mla keys those of a query and a value head (llama.cpp's deepseek2 converter).
  w.SetUint32(a + "attention.key_length",
              static_cast<uint32_t>(mla ? c.kv_lora_rank + c.rope_dim : c.head_dim));
  w.SetUint32(a + "attention.value_length",
              static_cast<uint32_t>(mla ? c.kv_lora_rank : c.head_dim));
  if (mla) {
    w.SetUint32(a + "attention.key_length_mla", static_cast<uint32_t>(c.head_dim));
    w.SetUint32(a + "attention.value_length_mla", static_cast<uint32_t>(c.v_head_dim));
    w.SetUint32(a + "attention.kv_lora_rank", static_cast<uint32_t>(c.kv_lora_rank));
    // Written even when 0 (a plain attn_q): llama.cpp requires it unless the layer count
    // is a "lite" model's (26 or 27).
    w.SetUint32(a + "attention.q_lora_rank", static_cast<uint32_t>(c.q_lora_rank));
    // llama.cpp requires the expert FFN size and shared count even when every layer is
    // dense (its converter writes the dense FFN size and no shared expert for Youtu-LLM).
    w.SetUint32(a + "leading_dense_block_count",
                static_cast<uint32_t>(c.moe() ? c.n_dense_layers : c.n_layers));
    w.SetUint32(a + "expert_feed_forward_length", static_cast<uint32_t>(c.ffn_dim));
    w.SetUint32(a + "expert_shared_count", static_cast<uint32_t>(c.n_shared_experts));
    if (c.moe()) {
      w.SetUint32(a + "expert_count", static_cast<uint32_t>(c.n_experts));
      w.SetUint32(a + "expert_used_count", static_cast<uint32_t>(c.n_experts_used));
      w.SetFloat32(a + "expert_weights_scale", c.expert_weights_scale);
      w.SetBool(a + "expert_weights_norm", c.expert_weights_norm);
      w.SetUint32(a + "expert_gating_func", static_cast<uint32_t>(c.expert_gating));
      if (c.n_expert_groups > 1) {
        w.SetUint32(a + "expert_group_count", static_cast<uint32_t>(c.n_expert_groups));
        w.SetUint32(a + "expert_group_used_count", static_cast<uint32_t>(c.n_expert_groups_used));
      }
    }
  }
  w.SetUint32(a + "rope.dimension_count", static_cast<uint32_t>(c.rope_dim));
  w.SetFloat32(a + "rope.freq_base", c.rope_base);
  if (c.yarn_ext_factor != 0.0f) {
    // YaRN as llama.cpp's converters write it (its beta and ext_factor defaults are not
    // keys for these architectures; deepseek2's log multiplier is written times 0.1).
    w.SetString(a + "rope.scaling.type", "yarn");
    w.SetFloat32(a + "rope.scaling.factor", 1.0f / c.rope_freq_scale);
    if (c.yarn_orig_context_length > 0) {
      w.SetUint32(a + "rope.scaling.original_context_length",
                  static_cast<uint32_t>(c.yarn_orig_context_length));
    }
    if (c.yarn_log_multiplier != 0.0f) {
      w.SetFloat32(a + "rope.scaling.yarn_log_multiplier", 0.1f * c.yarn_log_multiplier);
    }
  } else if (c.rope_freq_scale != 1.0f) {
    w.SetString(a + "rope.scaling.type", "linear");
    w.SetFloat32(a + "rope.scaling.factor", 1.0f / c.rope_freq_scale);
  }
  if (c.rope_attn_factor != 1.0f) w.SetFloat32(a + "rope.scaling.attn_factor", c.rope_attn_factor);
  if (c.sliding_window > 0) {
    w.SetUint32(a + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
  }
  w.SetFloat32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
  w.SetUint32(a + "vocab_size", static_cast<uint32_t>(c.vocab_size));
  if (moe) {
    w.SetUint32(a + "expert_count", static_cast<uint32_t>(c.n_experts));
    w.SetUint32(a + "expert_used_count", static_cast<uint32_t>(c.n_experts_used));
    w.SetUint32(a + "expert_feed_forward_length", static_cast<uint32_t>(c.ffn_dim));
  }

  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", vocab->pieces);
  w.SetFloat32Array("tokenizer.ggml.scores", vocab->scores);
  std::vector<int32_t> types;  // [vocab]
  types.reserve(vocab->kinds.size());
  for (model::TokenKind k : vocab->kinds) types.push_back(static_cast<int32_t>(k));
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  w.SetUint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab->bos_id));
  w.SetUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab->eos_id));
  w.SetUint32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(vocab->unk_id));
  w.SetBool("tokenizer.ggml.add_bos_token", vocab->add_bos);
  w.SetBool("tokenizer.ggml.add_eos_token", false);
  w.SetBool("tokenizer.ggml.add_space_prefix", vocab->add_space_prefix);

  const float sd = options.weight_std;
  const uint64_t seed = options.seed;
  auto matrix = [&](std::string_view tensor, int layer, int64_t rows, int64_t cols,
                    int64_t experts = 0) {
    const std::string name = layer < 0
                                 ? absl::StrCat(std::string(tensor), ".weight")
                                 : absl::StrCat("blk.", layer, ".", std::string(tensor), ".weight");
    const DType dtype = MatrixDType(options, tensor, layer);
    if (cols % model::DTypeBlockElems(dtype) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": ", std::string(model::DTypeName(dtype)), " needs rows of a multiple of ",
          model::DTypeBlockElems(dtype), " elements, got ", cols));
    }
    return AddMatrix(w, name, dtype, rows, cols, seed, sd, experts);
  };
  absl::Status s = matrix("token_embd", -1, c.vocab_size, c.dim);
  for (int l = 0; s.ok() && l < c.n_layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    if (s.ok()) s = AddNorm(w, p + "attn_norm.weight", c.dim);
    if (mla) {
      if (s.ok()) s = LatentAttentionTensors(c, l, matrix, w);
    } else {
      if (s.ok()) s = matrix("attn_q", l, c.q_dim(), c.dim);
      if (s.ok()) s = matrix("attn_k", l, c.kv_dim(), c.dim);
      if (s.ok()) s = matrix("attn_v", l, c.kv_dim(), c.dim);
    }
    if (s.ok()) s = matrix("attn_output", l, c.dim, c.attn_out_dim());
    if (s.ok()) s = AddNorm(w, p + "ffn_norm.weight", c.dim);
    if (c.LayerHasExperts(l)) {
      if (s.ok()) s = matrix("ffn_gate_inp", l, c.n_experts, c.dim);
      if (s.ok()) s = matrix("ffn_gate_exps", l, c.ffn_dim, c.dim, c.n_experts);
      if (s.ok()) s = matrix("ffn_up_exps", l, c.ffn_dim, c.dim, c.n_experts);
      if (s.ok()) s = matrix("ffn_down_exps", l, c.dim, c.ffn_dim, c.n_experts);
      if (c.n_shared_experts > 0) {
        if (s.ok()) s = matrix("ffn_gate_shexp", l, c.shared_ffn_dim(), c.dim);
        if (s.ok()) s = matrix("ffn_up_shexp", l, c.shared_ffn_dim(), c.dim);
        if (s.ok()) s = matrix("ffn_down_shexp", l, c.dim, c.shared_ffn_dim());
      }
      if (c.expert_probs_bias && s.ok()) {
        s = AddVector(w, p + "exp_probs_b.bias", c.n_experts, seed, 0.0f, sd);
      }
    } else {
      if (s.ok()) s = matrix("ffn_gate", l, c.DenseFfnDim(), c.dim);
      if (s.ok()) s = matrix("ffn_up", l, c.DenseFfnDim(), c.dim);
      if (s.ok()) s = matrix("ffn_down", l, c.dim, c.DenseFfnDim());
    }
    if (c.attention_qkv_bias) {
      if (s.ok()) s = AddVector(w, p + "attn_q.bias", c.q_dim(), seed, 0.0f, sd);
      if (s.ok()) s = AddVector(w, p + "attn_k.bias", c.kv_dim(), seed, 0.0f, sd);
      if (s.ok()) s = AddVector(w, p + "attn_v.bias", c.kv_dim(), seed, 0.0f, sd);
    }
    if (c.attention_output_bias && s.ok()) {
      s = AddVector(w, p + "attn_output.bias", c.dim, seed, 0.0f, sd);
    }
    if (c.qk_norm) {
      if (s.ok()) s = AddVector(w, p + "attn_q_norm.weight", c.head_dim, seed, 1.0f, 0.2f);
      if (s.ok()) s = AddVector(w, p + "attn_k_norm.weight", c.head_dim, seed, 1.0f, 0.2f);
    }
  }
  if (s.ok() && !c.rope_freq_factors.empty()) {
    const std::vector<float> factors = c.rope_freq_factors;  // [rope_dim / 2]
    s = w.AddTensor("rope_freqs.weight", DType::kF32, {factors.size()},
                    [factors](GgufByteSink& sink) {
                      return sink.Append(factors.data(), factors.size() * sizeof(float));
                    });
  }
  if (s.ok()) s = AddNorm(w, "output_norm.weight", c.dim);
  if (s.ok() && !c.tied_embeddings) s = matrix("output", -1, c.vocab_size, c.dim);
  if (!s.ok()) return s;
  return w.WriteToFile(path);
}

}  // namespace kvserve::bench
