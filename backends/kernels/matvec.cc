#include "backends/kernels/matvec.h"

#include <cstddef>
#include <cstring>

#include "model/dtype.h"
#include "model/quant.h"

namespace kvserve::backends::kernels {
namespace {

using model::DType;

// Loads element i of a 16-bit row (unaligned-safe).
inline uint16_t Load16(const uint8_t* p, size_t i) {
  uint16_t v;
  std::memcpy(&v, p + 2 * i, 2);
  return v;
}

inline float LoadF32(const uint8_t* p, size_t i) {
  float v;
  std::memcpy(&v, p + 4 * i, 4);
  return v;
}

// One q8_0 block: f16 scale d, then 32 int8 quants q; element j is d * q[j].
inline float Q8Scale(const uint8_t* block) { return model::HalfToFloat(Load16(block, 0)); }
inline int8_t Q8Quant(const uint8_t* block, int j) { return static_cast<int8_t>(block[2 + j]); }

}  // namespace

void RowToFloat(const model::TensorView& w, int64_t row, std::span<float> out) {
  const uint8_t* p = w.row(row);
  const size_t n = out.size();
  switch (w.type) {
    case DType::kF32:
      for (size_t c = 0; c < n; ++c) out[c] = LoadF32(p, c);
      return;
    case DType::kF16:
      for (size_t c = 0; c < n; ++c) out[c] = model::HalfToFloat(Load16(p, c));
      return;
    case DType::kBF16:
      for (size_t c = 0; c < n; ++c) out[c] = model::BF16ToFloat(Load16(p, c));
      return;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      model::DecodeRow(w.type, p, out);
      return;
  }
}

float DotRow(const model::TensorView& w, int64_t row, std::span<const float> x) {
  const uint8_t* p = w.row(row);
  const size_t n = x.size();
  float sum = 0.0f;
  switch (w.type) {
    case DType::kF32:
      for (size_t c = 0; c < n; ++c) sum += LoadF32(p, c) * x[c];
      break;
    case DType::kF16:
      for (size_t c = 0; c < n; ++c) sum += model::HalfToFloat(Load16(p, c)) * x[c];
      break;
    case DType::kBF16:
      for (size_t c = 0; c < n; ++c) sum += model::BF16ToFloat(Load16(p, c)) * x[c];
      break;
    case DType::kQ8_0:
      // Per block: d * sum_j q[j] * x[j], as ggml does (the scale factors out of a block).
      for (size_t b = 0; b < n / model::kQ8_0BlockElems; ++b) {
        const uint8_t* block = p + b * model::kQ8_0BlockBytes;
        const float* xb = x.data() + b * model::kQ8_0BlockElems;
        float block_sum = 0.0f;
        for (int j = 0; j < model::kQ8_0BlockElems; ++j) {
          block_sum += static_cast<float>(Q8Quant(block, j)) * xb[j];
        }
        sum += Q8Scale(block) * block_sum;
      }
      break;
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: {
      // Decode a block, then accumulate its products in index order.
      const size_t block = static_cast<size_t>(model::DTypeBlockElems(w.type));
      const size_t block_bytes = static_cast<size_t>(model::DTypeBlockBytes(w.type));
      float values[model::kQKBlockElems];
      for (size_t b = 0; b < n / block; ++b) {
        model::DecodeRow(w.type, p + b * block_bytes, std::span<float>(values, block));
        for (size_t j = 0; j < block; ++j) sum += values[j] * x[b * block + j];
      }
      break;
    }
  }
  return sum;
}

void MatVec(const model::TensorView& w, std::span<const float> x, std::span<float> y) {
  for (int64_t r = 0; r < w.rows; ++r) y[r] = DotRow(w, r, x);
}

void MatMulRows(const model::TensorView& w, std::span<const float> x, std::span<float> y) {
  const size_t cols = static_cast<size_t>(w.cols);
  const size_t rows = static_cast<size_t>(w.rows);
  const size_t n_tokens = cols == 0 ? 0 : x.size() / cols;
  for (size_t t = 0; t < n_tokens; ++t) {
    MatVec(w, x.subspan(t * cols, cols), y.subspan(t * rows, rows));
  }
}

std::span<const float> F32Values(const model::TensorView& w) {
  return {static_cast<const float*>(w.data), static_cast<size_t>(w.elements())};
}

}  // namespace kvserve::backends::kernels
