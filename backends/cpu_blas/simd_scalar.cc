// Portable kernels: the fallback on CPUs without AVX2, and the oracle the vector levels
// are tested against.
#include <cstddef>
#include <cstdint>
#include <span>

#include "backends/cpu_blas/q8_activations.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "backends/kernels/ops.h"
#include "model/dtype.h"

namespace kvserve::backends::cpu_blas {
namespace {

struct F16 {
  static float ToFloat(uint16_t v) { return model::HalfToFloat(v); }
};
struct BF16 {
  static float ToFloat(uint16_t v) { return model::BF16ToFloat(v); }
};
struct F32 {
  static float ToFloat(float v) { return v; }
};

template <typename Conv, typename WeightT>
void MatMul(const WeightT* w, int64_t cols, int64_t row_begin, int64_t row_end, const float* x,
            int64_t ldx, int n, float* y, int64_t ldy) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const WeightT* wr = w + r * cols;
    for (int i = 0; i < n; ++i) {
      const float* xi = x + i * ldx;
      float s = 0.0f;
      for (int64_t c = 0; c < cols; ++c) s += Conv::ToFloat(wr[c]) * xi[c];
      y[i * ldy + r] = s;
    }
  }
}

template <typename Conv, typename ElemT>
const ElemT* Row(const void* rows, size_t stride, int t) {
  return reinterpret_cast<const ElemT*>(static_cast<const uint8_t*>(rows) + t * stride);
}

template <typename Conv, typename ElemT>
void DotRows(const float* const* q, float* const* out, int nq, const void* rows, size_t stride,
             int count, int hd, float scale) {
  for (int j = 0; j < nq; ++j) {
    for (int t = 0; t < count; ++t) {
      const ElemT* r = Row<Conv, ElemT>(rows, stride, t);
      float s = 0.0f;
      for (int i = 0; i < hd; ++i) s += q[j][i] * Conv::ToFloat(r[i]);
      out[j][t] = scale * s;
    }
  }
}

template <typename Conv, typename ElemT>
void AxpyRows(const float* const* a, float* const* y, int nq, const void* rows, size_t stride,
              int count, int hd) {
  for (int j = 0; j < nq; ++j) {
    for (int t = 0; t < count; ++t) {
      const ElemT* r = Row<Conv, ElemT>(rows, stride, t);
      for (int i = 0; i < hd; ++i) y[j][i] += a[j][t] * Conv::ToFloat(r[i]);
    }
  }
}

template <typename XBlock, float (*kDot)(const uint8_t*, const XBlock*, int64_t)>
void QMatMul(const uint8_t* w, int64_t row_bytes, int64_t cols, int64_t row_begin, int64_t row_end,
             const void* xq, int64_t ldxq, int n, float* y, int64_t ldy) {
  const auto* x = static_cast<const uint8_t*>(xq);
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int i = 0; i < n; ++i) {
      y[i * ldy + r] = kDot(w + r * row_bytes, reinterpret_cast<const XBlock*>(x + i * ldxq), cols);
    }
  }
}

void F16ToF32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = model::HalfToFloat(in[i]);
}

void BF16ToF32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = model::BF16ToFloat(in[i]);
}

void F32ToF16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = model::FloatToHalf(in[i]);
}

void Softmax(float* x, int64_t n) { kernels::Softmax(std::span<float>(x, static_cast<size_t>(n))); }

void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  const size_t len = static_cast<size_t>(n);
  kernels::RmsNorm(std::span<const float>(x, len), std::span<const float>(w, len), eps,
                   std::span<float>(out, len));
}

void SwiGlu(float* gate, const float* up, int64_t n) {
  kernels::SwiGlu(std::span<float>(gate, static_cast<size_t>(n)),
                  std::span<const float>(up, static_cast<size_t>(n)));
}

constexpr KernelSet kScalarSet = {
    Isa::kScalar,
    &MatMul<F32, float>,
    &MatMul<F16, uint16_t>,
    &MatMul<BF16, uint16_t>,
    &QMatMul<Q8Block, &DotQ8_0>,
    &QMatMul<Q8Block, &DotQ4_0>,
    &QMatMul<Q8Block, &DotQ5_0>,
    &QMatMul<Q8Block, &DotQ5_1>,
    &QMatMul<Q8KBlock, &DotQ4_K>,
    &QMatMul<Q8KBlock, &DotQ5_K>,
    &QMatMul<Q8KBlock, &DotQ6_K>,
    &DotRows<F32, float>,
    &DotRows<F16, uint16_t>,
    &AxpyRows<F32, float>,
    &AxpyRows<F16, uint16_t>,
    &F16ToF32,
    &BF16ToF32,
    &F32ToF16,
    &Softmax,
    &SwiGlu,
    &RmsNorm,
    &QuantizeActivations,
};

}  // namespace

const KernelSet& ScalarKernels() { return kScalarSet; }

}  // namespace kvserve::backends::cpu_blas
