// AVX-512 F kernels (16 float lanes). Compiled with per-function target attributes so
// the rest of the program stays baseline x86-64; called only when
// IsaSupported(Isa::kAvx512).
// GCC 12's avx512fintrin.h initialises "undefined" vectors from themselves, which
// -Wuninitialized reports when the intrinsics are used under a target attribute
// (GCC bug 105593, fixed in GCC 13). The warning is about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backends/cpu_blas/simd_kernels.h"
#include "model/dtype.h"

#define KVSERVE_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

namespace kvserve::backends::cpu_blas {
namespace {

// Weight element types: Load converts 16 consecutive elements to floats, One a single one.
struct F32W {
  using T = float;
  KVSERVE_AVX512 static __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
  static float One(float v) { return v; }
};
struct F16W {
  using T = uint16_t;
  KVSERVE_AVX512 static __m512 Load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static float One(uint16_t v) { return model::HalfToFloat(v); }
};
struct BF16W {
  using T = uint16_t;
  // bf16 is the upper half of an f32: widen to 32 bits and shift left by 16 (exact).
  KVSERVE_AVX512 static __m512 Load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static float One(uint16_t v) { return model::BF16ToFloat(v); }
};

KVSERVE_AVX512 inline float HSum(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 sh = _mm_movehdup_ps(s);
  s = _mm_add_ps(s, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}

// y[i * ldy + r] = W[r, :] · x[i, :] for r in [0, R), i in [0, N): R weight rows against
// N activation rows, R * N accumulators held in registers (32 zmm registers).
template <typename W, int R, int N>
KVSERVE_AVX512 inline void Block(const typename W::T* w, int64_t cols, const float* x, int64_t ldx,
                                 float* y, int64_t ldy) {
  __m512 acc[R][N];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) acc[r][i] = _mm512_setzero_ps();
  }
  // The R rows are contiguous in memory. While reading them, prefetch the block two
  // blocks ahead at the same pace (one prefetch per 64-byte line); see simd_avx2.cc.
  using T = typename W::T;
  // (Integer arithmetic: the address may lie past the end of the weights.)
  const uintptr_t ahead =
      reinterpret_cast<uintptr_t>(w) + static_cast<uintptr_t>(2 * R * cols) * sizeof(T);
  constexpr int kStepBytes = 16 * R * static_cast<int>(sizeof(T));
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
#pragma GCC unroll 8
    for (int b = 0; b < kStepBytes; b += 64) {
      _mm_prefetch(
          reinterpret_cast<const char*>(ahead + static_cast<uintptr_t>(c * R) * sizeof(T) + b),
          _MM_HINT_T0);
    }
    __m512 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = W::Load(w + r * cols + c);
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * ldx + c);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < N; ++i) {
      float s = HSum(acc[r][i]);
      for (int64_t t = c; t < cols; ++t) s += W::One(w[r * cols + t]) * x[i * ldx + t];
      y[i * ldy + r] = s;
    }
  }
}

// Block over R rows and any 1 <= nn <= 4 activation rows.
template <typename W, int R>
KVSERVE_AVX512 inline void BlockN(int nn, const typename W::T* w, int64_t cols, const float* x,
                                  int64_t ldx, float* y, int64_t ldy) {
  switch (nn) {
    case 1:
      Block<W, R, 1>(w, cols, x, ldx, y, ldy);
      break;
    case 2:
      Block<W, R, 2>(w, cols, x, ldx, y, ldy);
      break;
    case 3:
      Block<W, R, 3>(w, cols, x, ldx, y, ldy);
      break;
    default:
      Block<W, R, 4>(w, cols, x, ldx, y, ldy);
      break;
  }
}

// Four weight rows (hot in L1) against activation rows in groups of four.
template <typename W>
KVSERVE_AVX512 void MatMul(const typename W::T* w, int64_t cols, int64_t row_begin, int64_t row_end,
                           const float* x, int64_t ldx, int n, float* y, int64_t ldy) {
  int64_t r = row_begin;
  for (; r + 4 <= row_end; r += 4) {
    for (int i = 0; i < n; i += 4) {
      BlockN<W, 4>(std::min(4, n - i), w + r * cols, cols, x + i * ldx, ldx, y + i * ldy + r, ldy);
    }
  }
  for (; r < row_end; ++r) {
    for (int i = 0; i < n; i += 4) {
      BlockN<W, 1>(std::min(4, n - i), w + r * cols, cols, x + i * ldx, ldx, y + i * ldy + r, ldy);
    }
  }
}

KVSERVE_AVX512 float DotF32(const float* a, const float* b, int n) {
  __m512 s0 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16)
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
  float s = HSum(s0);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

KVSERVE_AVX512 float DotF16(const float* a, const uint16_t* b, int n) {
  __m512 s0 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), F16W::Load(b + i), s0);
  float s = HSum(s0);
  for (; i < n; ++i) s += a[i] * model::HalfToFloat(b[i]);
  return s;
}

KVSERVE_AVX512 void AxpyF32(float w, const float* x, float* y, int n) {
  const __m512 wv = _mm512_set1_ps(w);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += w * x[i];
}

KVSERVE_AVX512 void AxpyF16(float w, const uint16_t* x, float* y, int n) {
  const __m512 wv = _mm512_set1_ps(w);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(wv, F16W::Load(x + i), _mm512_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += w * model::HalfToFloat(x[i]);
}

template <typename W>
KVSERVE_AVX512 void Convert(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, W::Load(in + i));
  for (; i < n; ++i) out[i] = W::One(in[i]);
}

constexpr KernelSet kAvx512Set = {
    Isa::kAvx512, &MatMul<F32W>, &MatMul<F16W>, &MatMul<BF16W>, &DotF32,
    &DotF16,      &AxpyF32,      &AxpyF16,      &Convert<F16W>, &Convert<BF16W>,
};

}  // namespace

const KernelSet& Avx512Kernels() { return kAvx512Set; }

}  // namespace kvserve::backends::cpu_blas
