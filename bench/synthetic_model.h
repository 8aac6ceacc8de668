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
//   l3-1b    Llama 3.2 1B: dim 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256,
//            tied, rope_base 500000 with Llama3RopeFactors(factor 32), context 8192
//   q3moe-mini  Qwen3-30B-A3B scaled down (for --arch qwen3moe only): its experts (128 of
//            FFN 768, 8 per token), head_dim 128, 8 query heads per KV head, rope_base 1e6,
//            rms_eps 1e-6; dim 512 (not 2048), 4 layers (not 48), vocab 32000 (not 151936),
//            context 4096: about 642 M parameters, 59 M read per token (38 M of them in the
//            8 experts of each layer; q8_0: 683 MB)
//   youtu2b  Youtu-LLM-2B (for --arch deepseek2 only; dense, latent attention): dim 2048,
//            32 layers, 16 heads, FFN 6144, vocab 128256, tied, kv_lora_rank 512,
//            q_lora_rank 1536, qk_nope 128 + rope 64 per query head, v_head_dim 128,
//            rope_base 1.6e6, rms_eps 1e-6, context 8192 (not 128k): about 1.96 B parameters
//   deepseek-v2-lite  DeepSeek-V2-Lite (for --arch deepseek2 only): dim 2048, 27 layers,
//            16 heads, latent attention (kv_lora_rank 512, no query compression, qk_nope
//            128 + rope 64, v_head_dim 128), layer 0 dense of FFN 10944, then 64 experts
//            of FFN 1408, 6 per token, 2 shared, softmax gating, unnormalized weights;
//            vocab 102400, rms_eps 1e-6, context 4096 (the real model's YaRN scaling to
//            163840 is not written): about 15.7 B parameters
// NOT_FOUND for another name.
absl::StatusOr<model::ModelConfig> PresetConfig(std::string_view name);
std::vector<std::string> PresetNames();

// Experts ApplyArchitecture gives a shape without them for qwen3moe: each of the shape's
// FFN size.
inline constexpr int kDefaultExperts = 8;
inline constexpr int kDefaultExpertsUsed = 2;

// Turns a llama-architecture config into `arch` ("llama", "qwen2", "qwen3", "qwen3moe" or
// "deepseek2") with that architecture's features: qwen2 rotate-halves RoPE and Q/K/V biases,
// qwen3 rotate-halves RoPE and Q/K norms, qwen3moe those of qwen3 and experts (the shape's,
// else kDefaultExperts of which kDefaultExpertsUsed per token), deepseek2 multi-head latent
// attention and experts (the shape's, else qk_nope = v_head_dim = head_dim, rope_dim =
// head_dim / 2, kv_lora_rank = q_lora_rank = dim / 2, and DeepSeek-V2's experts: layer 0
// dense of the shape's FFN size, then kDefaultExperts experts of half that size,
// kDefaultExpertsUsed per token, 2 shared, softmax gating, unnormalized weights; a
// one-layer shape has no dense layer). INVALID_ARGUMENT for another name, for a shape
// with experts and another architecture, for a shape with latent attention and another
// architecture or with qwen3moe's experts and deepseek2, or for qwen2 when
// n_heads * head_dim != dim (llama.cpp's qwen2 loader requires it).
absl::Status ApplyArchitecture(std::string_view arch, model::ModelConfig& config);

// Llama 3.x RoPE factors (the rope_freqs tensor convert_hf_to_gguf.py writes for
// rope_scaling.rope_type "llama3"): for each pair i with wavelength 2 pi / base^(-2i/dim),
// 1 below original_context / high_freq_factor, `factor` above original_context /
// low_freq_factor, and the smooth interpolation in between. [rope_dim / 2] values.
std::vector<float> Llama3RopeFactors(float rope_base, int rope_dim, float factor,
                                     float low_freq_factor = 1.0f, float high_freq_factor = 4.0f,
                                     int original_context = 8192);

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
  // Shape and architecture; config.tied_embeddings omits output.weight. The features of
  // config (attention_qkv_bias, attention_output_bias, qk_norm, rope_freq_factors,
  // rope_freq_scale, sliding_window) become the tensors and keys llama.cpp reads for them.
  model::ModelConfig config;
  // Element type of the matrices under QuantMix::kUniform (norm gains are always f32):
  // any model::DType; a quantized type needs dim, q_dim and ffn_dim multiples of its
  // block (32 for q8_0, q4_0, q5_0 and q5_1, 256 for q4_k, q5_k and q6_k).
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
// "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_inp",
// "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", and for deepseek2 "attn_q_a", "attn_q_b",
// "attn_kv_a_mqa", "attn_k_b", "attn_v_b") of layer `layer`. The router
// (ffn_gate_inp) is always f32; ffn_down_exps follows ffn_down in the Q4_K_M mix.
model::DType MatrixDType(const SyntheticModelOptions& options, std::string_view tensor, int layer);

// Writes a GGUF v3 file of config.architecture (llama, qwen2, qwen3, qwen3moe or deepseek2)
// with every key
// llama.cpp needs (general.*, <arch>.*, tokenizer.ggml.*) and tensors token_embd,
// blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
// ffn_down}, output_norm and (untied) output; plus blk.N.attn_{q,k,v}.bias,
// blk.N.attn_output.bias, blk.N.attn_{q,k}_norm.weight and rope_freqs.weight when the
// config has those features (biases are N(0, weight_std^2) in f32, Q/K norm gains
// 1 + N(0, 0.2^2) in f32). qwen3moe: expert_count, expert_used_count and
// expert_feed_forward_length, and per layer ffn_gate_inp and the 3-D ffn_{gate,up,down}_exps
// instead of ffn_{gate,up,down}. deepseek2: the latent attention keys (kv_lora_rank,
// q_lora_rank, key/value_length and their _mla variants) and per layer attn_q_a,
// attn_q_a_norm, attn_q_b (or attn_q when q_lora_rank is 0), attn_kv_a_mqa,
// attn_kv_a_norm, attn_k_b and attn_v_b instead of attn_q, attn_k and attn_v; dense
// (no experts): leading_dense_block_count = block_count, expert_feed_forward_length =
// FFN size, expert_shared_count 0, as llama.cpp's converter writes Youtu-LLM; with
// experts: leading_dense_block_count, feed_forward_length (the dense layers'),
// expert_count, expert_used_count, expert_feed_forward_length, expert_shared_count,
// expert_weights_scale, expert_weights_norm, expert_gating_func and (groups > 1)
// expert_group_count / expert_group_used_count, and in each layer with experts
// ffn_gate_inp, ffn_{gate,up,down}_exps, ffn_{gate,up,down}_shexp (with shared experts)
// and exp_probs_b.bias (with the selection bias, N(0, weight_std^2)).
// Tensor bytes are generated row by row while writing: memory use stays small for any
// size. The same options always give the same bytes. Errors: INVALID_ARGUMENT for an
// invalid config or dtype, I/O errors from the writer.
absl::Status WriteSyntheticModel(const SyntheticModelOptions& options, const std::string& path);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_SYNTHETIC_MODEL_H_
