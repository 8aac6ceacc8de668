// Portable kernels: the fallback on CPUs without AVX2, and the oracle the vector levels
// are tested against.
#include <cstdint>

#include "backends/cpu_blas/simd_kernels.h"
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

float DotF32(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

float DotF16(const float* a, const uint16_t* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * model::HalfToFloat(b[i]);
  return s;
}

void AxpyF32(float w, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += w * x[i];
}

void AxpyF16(float w, const uint16_t* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += w * model::HalfToFloat(x[i]);
}

void F16ToF32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = model::HalfToFloat(in[i]);
}

void BF16ToF32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = model::BF16ToFloat(in[i]);
}

constexpr KernelSet kScalarSet = {
    Isa::kScalar,
    &MatMul<F32, float>,
    &MatMul<F16, uint16_t>,
    &MatMul<BF16, uint16_t>,
    &DotF32,
    &DotF16,
    &AxpyF32,
    &AxpyF16,
    &F16ToF32,
    &BF16ToF32,
};

}  // namespace

const KernelSet& ScalarKernels() { return kScalarSet; }

}  // namespace kvserve::backends::cpu_blas
