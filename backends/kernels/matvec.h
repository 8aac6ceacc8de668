// Products of a weight TensorView (any model::DType) with float vectors. Elements are
// converted one by one with model/dtype.h (f16/bf16 exactly) and model/quant.h
// (DecodeRow; q8_0 products as scale * sum(int8 * x) per block, as ggml), and accumulated
// in float in index order. These are the scalar oracles that an optimized
// backend replaces with BLAS/SIMD and compares against.
//
// Threading: pure functions; concurrent calls on disjoint outputs are safe.
#ifndef KVSERVE_BACKENDS_KERNELS_MATVEC_H_
#define KVSERVE_BACKENDS_KERNELS_MATVEC_H_

#include <cstdint>
#include <span>

#include "model/tensor.h"

namespace kvserve::backends::kernels {

// out[c] = float(W[row, c]) for c in [0, cols)                   (dequantise one row)
// out: [cols]. Used for the token embedding lookup.
// Precondition: 0 <= row < w.rows, out.size() == w.cols.
void RowToFloat(const model::TensorView& w, int64_t row, std::span<float> out);

// sum_c float(W[row, c]) * x[c]
// Precondition: 0 <= row < w.rows, x.size() == w.cols.
float DotRow(const model::TensorView& w, int64_t row, std::span<const float> x);

// y[r] = sum_c W[r, c] * x[c] for r in [0, rows)                 (y = W x)
// x: [cols], y: [rows]. Precondition: sizes match; y does not alias x.
void MatVec(const model::TensorView& w, std::span<const float> x, std::span<float> y);

// Y[t, :] = W X[t, :] for t in [0, n_tokens)                     (row-wise MatVec)
// x: [n_tokens, cols], y: [n_tokens, rows], both row-major and contiguous.
// Precondition: x.size() == n_tokens * cols, y.size() == n_tokens * rows.
void MatMulRows(const model::TensorView& w, std::span<const float> x, std::span<float> y);

// The [rows * cols] floats of an F32 tensor (norm gains). Precondition: w.type == kF32.
std::span<const float> F32Values(const model::TensorView& w);

}  // namespace kvserve::backends::kernels

#endif  // KVSERVE_BACKENDS_KERNELS_MATVEC_H_
