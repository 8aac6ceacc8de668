// The shape of a decoder-only llama-style transformer, independent of file format.
#ifndef KVSERVE_MODEL_MODEL_CONFIG_H_
#define KVSERVE_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace kvserve::model {

// How RoPE pairs the dimensions of a head.
enum class RopeStyle : uint8_t {
  kAdjacentPairs,  // (x[2i], x[2i+1]) rotate together: GGUF llama, llama2.c.
  kRotateHalves,   // (x[i], x[i + rope_dim/2]) rotate together: NeoX / qwen2 style.
};

struct ModelConfig {
  std::string architecture = "llama";
  int dim = 0;  // hidden size (embedding length)
  int n_layers = 0;
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads; n_heads % n_kv_heads == 0 (GQA/MQA)
  int head_dim = 0;    // usually dim / n_heads
  int ffn_dim = 0;     // SwiGLU hidden size
  int vocab_size = 0;
  int context_length = 0;  // maximum positions the model was trained for
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  int rope_dim = 0;  // dimensions of each head that RoPE rotates (<= head_dim, even)
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  bool tied_embeddings = false;  // LM head is the token embedding table

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }

  // OK when every field is positive and consistent; otherwise INVALID_ARGUMENT
  // naming the offending field. Readers call this before building weights.
  absl::Status Validate() const;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_MODEL_CONFIG_H_
