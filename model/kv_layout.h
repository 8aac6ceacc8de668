// The memory layout of one paged KV block, shared by the block pool (cache/) and the
// backends that read and write it. Neither owns the other: the pool allocates blocks,
// a backend fills and reads them through this layout.
#ifndef KVSERVE_MODEL_KV_LAYOUT_H_
#define KVSERVE_MODEL_KV_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "model/dtype.h"
#include "model/model_config.h"

namespace kvserve::model {

// One block holds `block_tokens` consecutive positions of one sequence, for every layer:
//   block = [n_layers][planes][block_tokens][kv_dim] elements of `dtype`,
// planes = 2 (K then V; K rows hold keys after RoPE) for ordinary attention, or 1 for
// multi-head latent attention (the row is the latent c ‖ k_pe after RoPE, see
// ModelConfig::kv_lora_rank). Position p of a sequence lives in block p / block_tokens,
// row p % block_tokens.
struct KvLayout {
  int n_layers = 0;
  int kv_dim = 0;
  int block_tokens = 16;
  DType dtype = DType::kF32;  // kF32 or kF16
  int planes = 2;             // 2 (K, V) or 1 (the latent of MLA)

  static KvLayout ForModel(const ModelConfig& c, int block_tokens, DType dtype) {
    return KvLayout{c.n_layers, c.kv_dim(), block_tokens, dtype, c.kv_planes()};
  }
  size_t row_bytes() const { return DTypeBytes(dtype, static_cast<size_t>(kv_dim)); }
  size_t plane_bytes() const { return row_bytes() * static_cast<size_t>(block_tokens); }
  size_t block_bytes() const {
    return plane_bytes() * static_cast<size_t>(planes) * static_cast<size_t>(n_layers);
  }
  // Bytes one token's KV takes in every layer: block_bytes() / block_tokens.
  size_t token_bytes() const {
    return row_bytes() * static_cast<size_t>(planes) * static_cast<size_t>(n_layers);
  }
  // Byte offset of row `row` of plane `kind` (K 0 or V 1; the latent 0) of `layer`.
  // Precondition: 0 <= kind < planes.
  size_t offset(int layer, int kind, int row) const {
    return (static_cast<size_t>(layer) * static_cast<size_t>(planes) + static_cast<size_t>(kind)) *
               plane_bytes() +
           static_cast<size_t>(row) * row_bytes();
  }
  friend bool operator==(const KvLayout& a, const KvLayout& b) = default;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_KV_LAYOUT_H_
