// Reading and writing one sequence's K/V rows in the paged block layout of
// model/kv_layout.h, converting between float and the layout's element type (f32/f16).
#ifndef KVSERVE_BACKENDS_KERNELS_KV_ROWS_H_
#define KVSERVE_BACKENDS_KERNELS_KV_ROWS_H_

#include <cstdint>
#include <span>

#include "model/kv_layout.h"

namespace kvserve::backends::kernels {

enum class KvKind : int { kKey = 0, kValue = 1 };

// A non-owning view of one sequence's KV blocks. Position p lives in block
// p / block_tokens, row p % block_tokens (see model::KvLayout).
//
// Invariants: `layout` outlives the view; every block pointer is KvLayout::block_bytes()
// long. Callers check positions against capacity_tokens() before reading or writing
// (ValidateBatch does this for a Forward); the accessors do not re-check.
// Threading: the view is immutable; concurrent writes to different rows are safe.
class SequenceKv {
 public:
  SequenceKv(const model::KvLayout& layout, std::span<uint8_t* const> blocks)
      : layout_(&layout), blocks_(blocks) {}

  const model::KvLayout& layout() const { return *layout_; }
  // Positions the blocks can hold: blocks.size() * block_tokens.
  int64_t capacity_tokens() const {
    return static_cast<int64_t>(blocks_.size()) * layout_->block_tokens;
  }

  // Start of the [kv_dim] row of `kind` in `layer` at position `pos`.
  // Precondition: 0 <= layer < n_layers, 0 <= pos < capacity_tokens().
  uint8_t* Row(int layer, KvKind kind, int64_t pos) const;

  // Stores row[0, kv_dim) at (layer, kind, pos), rounding to f16 when the layout is f16.
  // Precondition: row.size() == kv_dim.
  void Write(int layer, KvKind kind, int64_t pos, std::span<const float> row) const;

  // out[0, kv_dim) = the stored row as float. Precondition: out.size() == kv_dim.
  void Read(int layer, KvKind kind, int64_t pos, std::span<float> out) const;

  // sum_i x[i] * row[offset + i] for i in [0, x.size())   (one head's slice of a K row)
  // Precondition: offset + x.size() <= kv_dim.
  float DotSlice(int layer, KvKind kind, int64_t pos, int offset, std::span<const float> x) const;

  // acc[i] += w * row[offset + i] for i in [0, acc.size())   (one head's slice of a V row)
  // Precondition: offset + acc.size() <= kv_dim.
  void AxpySlice(int layer, KvKind kind, int64_t pos, int offset, float w,
                 std::span<float> acc) const;

 private:
  const model::KvLayout* layout_;
  std::span<uint8_t* const> blocks_;
};

}  // namespace kvserve::backends::kernels

#endif  // KVSERVE_BACKENDS_KERNELS_KV_ROWS_H_
