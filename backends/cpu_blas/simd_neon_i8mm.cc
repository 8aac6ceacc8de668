// NEON + int8 matrix multiply level: the dotprod kernel set, with the q8_0, q4_0 and q5_0
// products by smmla (vmmlaq_s32: a 2x8 by 8x2 byte product into a 2x2 int32 tile) over
// 2 weight rows x 2 activation rows at a time. One smmla does the work of two sdot (32
// byte products), so a 32-element block of two weight rows against two activation rows
// takes 4 smmla where sdot takes 8. The k-quants and q5_1 keep the dotprod level's
// products.
//
// Batch invariance (GemmOptions::batch_invariant): every output is one float chain,
// fma(int block product, d_w * d_x) block after block, whatever the rows it shares its
// tile with; a last odd weight or activation row is paired with itself. So batch 1 runs
// the same code (its duplicated lanes cost no more instructions than sdot's).
//
// Compiled with a per-function target attribute; called only when
// IsaSupported(Isa::kNeonI8mm).
#include <arm_neon.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu_blas/q8_activations.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "model/dtype.h"
#include "model/quant.h"

#define KVSERVE_SIMD_TARGET __attribute__((target("arch=armv8.6-a+i8mm")))

namespace kvserve::backends::cpu_blas {
namespace {

#include "backends/cpu_blas/simd_quant_neon_inl.h"  // NOLINT(build/include): see its header

// The 8-byte halves of two rows' 16 bytes, as smmla operands: {a[0:8], b[0:8]} and
// {a[8:16], b[8:16]}.
KVSERVE_SIMD_TARGET inline int8x16_t ZipLow(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
KVSERVE_SIMD_TARGET inline int8x16_t ZipHigh(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

// The product of a 32-element format F (q8_0, q4_0, q5_0): per pair of weight rows, per group
// of up to kMmlaPairs activation row pairs (accumulators in registers), per block: decode
// both weight blocks once, then 4 smmla per activation row pair. Tile lanes: {w0 x0,
// w0 x1, w1 x0, w1 x1}.
template <typename F, int kMmlaPairs>
KVSERVE_SIMD_TARGET void QMatMulMmlaPairs(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                          int64_t row_begin, int64_t row_end, const void* xq,
                                          int64_t ldxq, int n, float* y, int64_t ldy) {
  static_assert(F::kElems == 32);
  const auto* x = static_cast<const uint8_t*>(xq);
  const int64_t blocks = cols / 32;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += 2) {
    const int64_t r1 = std::min(r0 + 1, row_end - 1);
    const uint8_t* w0 = w + r0 * row_bytes;
    const uint8_t* w1 = w + r1 * row_bytes;
    for (int i0 = 0; i0 < n; i0 += 2 * kMmlaPairs) {
      const int pairs = std::min(kMmlaPairs, (n - i0 + 1) / 2);
      float32x4_t acc[kMmlaPairs];
      for (int p = 0; p < kMmlaPairs; ++p) acc[p] = vdupq_n_f32(0.0f);
      for (int64_t b = 0; b < blocks; ++b) {
        Block32 a;
        Block32 c;
        F::Decode(w0 + b * F::kBytes, &a);
        F::Decode(w1 + b * F::kBytes, &c);
        const int8x16_t m[4] = {ZipLow(a.q[0], c.q[0]), ZipHigh(a.q[0], c.q[0]),
                                ZipLow(a.q[1], c.q[1]), ZipHigh(a.q[1], c.q[1])};
        const float32x4_t dw = vcombine_f32(vdup_n_f32(a.d), vdup_n_f32(c.d));
        for (int p = 0; p < pairs; ++p) {
          const int i = i0 + 2 * p;
          const Q8Block& x0 = XAtNeon<Q8Block>(x, ldxq, i, b);
          const Q8Block& x1 = XAtNeon<Q8Block>(x, ldxq, std::min(i + 1, n - 1), b);
          const int8x16_t lo0 = vld1q_s8(x0.q);
          const int8x16_t lo1 = vld1q_s8(x1.q);
          const int8x16_t hi0 = vld1q_s8(x0.q + 16);
          const int8x16_t hi1 = vld1q_s8(x1.q + 16);
          int32x4_t dot = vmmlaq_s32(vdupq_n_s32(0), m[0], ZipLow(lo0, lo1));
          dot = vmmlaq_s32(dot, m[1], ZipHigh(lo0, lo1));
          dot = vmmlaq_s32(dot, m[2], ZipLow(hi0, hi1));
          dot = vmmlaq_s32(dot, m[3], ZipHigh(hi0, hi1));
          const float32x2_t dx = vset_lane_f32(x1.d, vdup_n_f32(x0.d), 1);
          acc[p] = vfmaq_f32(acc[p], vcvtq_f32_s32(dot), vmulq_f32(dw, vcombine_f32(dx, dx)));
        }
      }
      for (int p = 0; p < pairs; ++p) {
        const int i = i0 + 2 * p;
        const bool two_x = i + 1 < n;
        y[i * ldy + r0] = vgetq_lane_f32(acc[p], 0);
        if (two_x) y[(i + 1) * ldy + r0] = vgetq_lane_f32(acc[p], 1);
        if (r1 != r0) {
          y[i * ldy + r1] = vgetq_lane_f32(acc[p], 2);
          if (two_x) y[(i + 1) * ldy + r1] = vgetq_lane_f32(acc[p], 3);
        }
      }
    }
  }
}

// KernelSet's QMatMulFn for F: one activation row pair per pass up to 2 rows (a group of
// 4 pairs costs batch 1 twice the instructions: its accumulators spill), 4 pairs beyond.
// Each output is the same chain either way.
template <typename F>
KVSERVE_SIMD_TARGET void QMatMulMmla(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                     int64_t row_begin, int64_t row_end, const void* xq,
                                     int64_t ldxq, int n, float* y, int64_t ldy) {
  if (n <= 2) {
    QMatMulMmlaPairs<F, 1>(w, row_bytes, cols, row_begin, row_end, xq, ldxq, n, y, ldy);
  } else {
    QMatMulMmlaPairs<F, 4>(w, row_bytes, cols, row_begin, row_end, xq, ldxq, n, y, ldy);
  }
}

KernelSet MakeI8mmSet() {
  KernelSet k = NeonDotprodKernels();
  k.matmul_q8_0 = &QMatMulMmla<Q8_0Neon>;
  k.matmul_q4_0 = &QMatMulMmla<Q4_0Neon>;
  k.matmul_q5_0 = &QMatMulMmla<Q5_0Neon>;
  k.isa = Isa::kNeonI8mm;
  return k;
}

}  // namespace

const KernelSet& NeonI8mmKernels() {
  static const KernelSet k = MakeI8mmSet();
  return k;
}

}  // namespace kvserve::backends::cpu_blas
