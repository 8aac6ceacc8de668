// llama2.c files: legacy checkpoints (run.c's format) and tokenizer.bin.
//
// Checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
// seq_len; a negative vocab_size means a separate classifier follows), then f32
// arrays in this order, per-layer ones stacked over layers:
//   token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim],
//   wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim],
//   w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim],
//   freq_cis_real/imag (2 x seq_len*head_size/2, unused), wcls [vocab, dim] if separate.
// Tokenizer: int32 max_token_length, then per token: f32 score, int32 len, bytes.
#ifndef KVSERVE_MODEL_LLAMA2C_H_
#define KVSERVE_MODEL_LLAMA2C_H_

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "model/vocabulary.h"
#include "model/weights.h"

namespace kvserve::model {

struct Llama2cCheckpoint {
  ModelConfig config;    // RoPE on adjacent pairs over the whole head, base 10000, eps 1e-5
  ModelWeights weights;  // views into the parsed bytes; output == token_embedding when shared
};

// Parses a checkpoint held in `bytes` (4-byte aligned, alive as long as the weights
// are used). The byte count must be exactly what the header implies. INVALID_ARGUMENT
// naming the problem; the newer "ak42" export versions are rejected by name.
absl::StatusOr<Llama2cCheckpoint> ParseLlama2cCheckpoint(std::span<const uint8_t> bytes);

// Parses a tokenizer.bin holding exactly `vocab_size` tokens into our Vocabulary
// convention: ' ' becomes U+2581 ("▁"), BOS/EOS written as "\n<s>\n" / "\n</s>\n"
// become "<s>" / "</s>"; kinds: <unk> unknown, <s> and </s> control, <0xNN> byte,
// others normal; bos 1, eos 2, unk 0, add_bos and add_space_prefix true.
absl::StatusOr<Vocabulary> ParseLlama2cTokenizer(std::span<const uint8_t> bytes, int vocab_size);

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_LLAMA2C_H_
