// A non-owning view of a weight tensor (row-major, unless a backend repacked it).
#ifndef KVSERVE_MODEL_TENSOR_H_
#define KVSERVE_MODEL_TENSOR_H_

#include <cstdint>

#include "model/dtype.h"

namespace kvserve::model {

// The order of a TensorView's elements in memory.
enum class Layout {
  // Row-major and contiguous: every view of a Model loaded without
  // LoadOptions::panels.
  kRows,
  // For the cpu_blas kernels (model/panels.h: made by Model::Load with
  // LoadOptions::panels, or as copies inside the cpu_blas backend), rows in panels of 16;
  // row() does not apply. bf16 only: each panel as column pairs of its 16 rows.
  kBf16Panels,
  // q4_0 only: each panel as blocks of 32 columns of its 16 rows.
  kQ4_0Panels,
  // q8_0 only: likewise.
  kQ8_0Panels,
  // q4_K only: each panel as blocks of 256 columns of its 16 rows.
  kQ4_KPanels,
  // q6_K only: likewise.
  kQ6_KPanels,
  // f32 only: each panel as columns of its 16 rows.
  kF32Panels,
};

// A matrix [rows, cols] (a vector is rows == 1) of `type` elements, row-major and
// contiguous (Layout::kRows). `data` points into memory owned by the Model (mmap or
// buffer) and is valid for the Model's lifetime. For a projection W the convention is
// y[rows] = W[rows, cols] · x[cols] (GGUF / llama2.c layout: one output per row).
struct TensorView {
  DType type = DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  Layout layout = Layout::kRows;

  int64_t elements() const { return rows * cols; }
  size_t row_bytes() const { return DTypeBytes(type, static_cast<size_t>(cols)); }
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * row_bytes();
  }
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_TENSOR_H_
