// Maps a parsed GGUF container of architecture "llama", "qwen2", "qwen3", "qwen3moe" or
// "deepseek2" onto
// ModelConfig, ModelWeights and Vocabulary (llama.cpp's key and tensor names).
#ifndef KVSERVE_MODEL_GGUF_LLAMA_H_
#define KVSERVE_MODEL_GGUF_LLAMA_H_

#include <memory>

#include "absl/status/statusor.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/vocabulary.h"
#include "model/weights.h"

namespace kvserve::model {

// general.architecture (ARCH) must be "llama", "qwen2", "qwen3", "qwen3moe" or "deepseek2".
// Reads
// ARCH.embedding_length, block_count, attention.head_count, feed_forward_length (qwen3moe:
// see below), context_length,
// attention.layer_norm_rms_epsilon (required); attention.head_count_kv (default
// head_count), attention.key_length (default embedding_length / head_count),
// rope.freq_base (default 10000), rope.dimension_count (default head_dim),
// rope.scaling.type ("none", "linear" or "yarn", default linear; "longrope" is
// UNIMPLEMENTED) with rope.scaling.factor (default none), rope.scaling.attn_factor
// (default 1), and for YaRN rope.scaling.original_context_length (default
// context_length) and deepseek2's rope.scaling.yarn_log_multiplier, as llama.cpp reads
// them (ModelConfig's yarn_* fields),
// attention.sliding_window (default 0 = none), vocab_size (if present,
// must equal the length of tokenizer.ggml.tokens, which is required).
// Per architecture, as llama.cpp (c392e50 for llama/qwen2, later for qwen3): llama has
// adjacent-pair RoPE, Q/K/V biases when blk.0.attn_q.bias exists, an output bias when
// blk.0.attn_output.bias exists, and RoPE factors from the rope_freqs.weight tensor when
// present (Llama 3.x); qwen2 has rotate-halves RoPE and Q/K/V biases; qwen3 rotate-halves
// RoPE and Q/K RMSNorms; qwen3moe as qwen3 plus experts: expert_count and
// expert_used_count (required; INVALID_ARGUMENT unless 1 <= used <= count), ffn_dim from
// expert_feed_forward_length, else feed_forward_length / expert_used_count (llama.cpp's
// fallback); deepseek2 has adjacent-pair RoPE and multi-head latent attention:
// attention.kv_lora_rank (required), attention.q_lora_rank (absent or 0: attn_q),
// attention.key_length_mla / value_length_mla (required, else UNIMPLEMENTED: the older
// attn_kv_b form), key_length / value_length when present equal to kv_lora_rank + rope
// dim / kv_lora_rank, and leading_dense_block_count, which must cover every layer
// (UNIMPLEMENTED otherwise: its MoE layers are not supported yet). tied_embeddings is set
// when output.weight is absent. Integer keys
// accept any integer type, float keys float32/float64. INVALID_ARGUMENT naming the key.
absl::StatusOr<ModelConfig> LlamaConfigFromGguf(const GgufFile& file);

// tokenizer.ggml.model must be "llama" (SentencePiece) or "gpt2" (byte-level BPE).
// tokens (required), scores (default 0), token_type (default normal) must have equal
// lengths. "llama": bos/eos/unknown_token_id default to 1/2/0, add_bos_token and
// add_space_prefix to true. "gpt2": merges are required, pre (the pre-tokenizer)
// defaults to "default" and must be known to PreTokenizer::Create (else
// INVALID_ARGUMENT naming it); bos/eos/unknown default to 11/11/none, add_bos_token
// to true for the Llama 3 pre-tokenizers only, add_space_prefix to false, as in
// llama.cpp. add_eos_token defaults to false. Reads only tokenizer.* keys, so it
// works on vocabulary-only files.
absl::StatusOr<Vocabulary> VocabularyFromGguf(const GgufFile& file);

// Views of token_embd, output_norm, output (token_embd when absent) and
// blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,ffn_down}
// .weight, plus what `config` asks for: blk.N.attn_{q,k,v}.bias (attention_qkv_bias),
// blk.N.attn_output.bias (attention_output_bias), blk.N.attn_{q,k}_norm.weight (qk_norm),
// blk.N.ffn_gate_inp.weight and one view per expert of blk.N.ffn_{gate,up,down}_exps.weight
// (moe(); ne[2] experts of [ne[1], ne[0]] each), and with mla() blk.N.{attn_q_a,
// attn_q_a_norm, attn_q_b, attn_kv_a_mqa, attn_kv_a_norm, attn_k_b, attn_v_b}.weight.
// GGUF ne[0] is the column count, the other dims multiply into rows. A missing tensor
// stays an empty view (Model::FromParts reports it); other tensors are ignored.
ModelWeights LlamaWeightsFromGguf(const GgufFile& file, const ModelConfig& config);

// All of the above, then Model::FromParts (which checks every shape). `storage`
// keeps the bytes `file` points into alive for the model's lifetime.
absl::StatusOr<std::unique_ptr<Model>> ModelFromGguf(const GgufFile& file,
                                                     std::shared_ptr<const void> storage);

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_GGUF_LLAMA_H_
