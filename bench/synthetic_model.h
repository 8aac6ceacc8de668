// Synthetic llama models at real shapes: seeded random weights and a byte-fallback
// SentencePiece-style vocabulary, written as GGUF files that kvserve and llama.cpp load.
#ifndef KVSERVE_BENCH_SYNTHETIC_MODEL_H_
#define KVSERVE_BENCH_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/dtype.h"
#include "model/model_config.h"
#include "model/vocabulary.h"

namespace kvserve::bench {

// Shapes (all context 2048 except tiny, rope over the whole head, rms_eps 1e-5):
//   tiny     dim 64, 2 layers, 4 heads, 2 KV heads, FFN 128, vocab 512, context 256 (tests)
//   s110m    dim 768, 12 layers, 12 heads, 12 KV heads, FFN 2048, vocab 32000
//   smol135m dim 576, 30 layers, 9 heads, 3 KV heads, FFN 1536, vocab 49152, tied embeddings
//   tl1b     dim 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632, vocab 32000
// NOT_FOUND for another name.
absl::StatusOr<model::ModelConfig> PresetConfig(std::string_view name);
std::vector<std::string> PresetNames();

// A vocabulary of `vocab_size` tokens: <unk>=0 (kind unknown), <s>=1, </s>=2 (control),
// the 256 byte tokens <0x00>..<0xFF> (kind byte, ids 3..258), then normal pieces: "▁",
// single characters, "▁"+character, then lowercase strings of growing length each
// also with a "▁" prefix. Every normal piece longer than one character is the
// concatenation of two earlier pieces, so SentencePiece BPE merges can reach it; scores
// decrease with the id (earlier pieces merge first). Any text encodes (bytes fall back to
// byte tokens). INVALID_ARGUMENT when vocab_size < 260.
absl::StatusOr<model::Vocabulary> SyntheticVocabulary(int vocab_size);

// How the matrices' element types are chosen.
enum class QuantMix {
  kUniform,  // every matrix is SyntheticModelOptions::dtype
  // llama.cpp's Q4_K_M (llama_tensor_get_type in src/llama-quant.cpp, llama without
  // experts): q6_K for output.weight (token_embd when tied) and for attn_v and ffn_down
  // in the layers where use_more_bits(i, n) holds (i < n/8, i >= 7n/8, or
  // (i - n/8) % 3 == 2); q4_K for every other matrix.
  kQ4_K_M,
};

struct SyntheticModelOptions {
  model::ModelConfig config;  // shape; config.tied_embeddings omits output.weight
  // Element type of the matrices under QuantMix::kUniform (norm gains are always f32):
  // any model::DType; a quantized type needs dim, q_dim and ffn_dim multiples of its
  // block (32 for q8_0 and q4_0, 256 for q4_k and q6_k).
  model::DType dtype = model::DType::kF32;
  QuantMix mix = QuantMix::kUniform;
  uint64_t seed = 1;
  // Matrix elements are approximately N(0, weight_std^2) (an Irwin-Hall sum of four
  // uniforms, so bounded by 3.5 sigma); norm gains are 1.0. Default 0.02 keeps the
  // activations of every preset in a sane range.
  float weight_std = 0.02f;
  std::string name = "kvserve-synthetic";  // general.name
};

// The element type of matrix `tensor` ("token_embd", "output" or a layer's "attn_q",
// "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down") of layer `layer`.
model::DType MatrixDType(const SyntheticModelOptions& options, std::string_view tensor, int layer);

// Writes a llama GGUF v3 file with every key llama.cpp needs (general.*, llama.*,
// tokenizer.ggml.*) and tensors token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v,
// attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm and (untied) output.
// Tensor bytes are generated row by row while writing: memory use stays small for any
// size. The same options always give the same bytes. Errors: INVALID_ARGUMENT for an
// invalid config or dtype, I/O errors from the writer.
absl::Status WriteSyntheticModel(const SyntheticModelOptions& options, const std::string& path);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_SYNTHETIC_MODEL_H_
