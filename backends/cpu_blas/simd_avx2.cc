// AVX2 + FMA + F16C kernels (8 float lanes). Compiled with per-function target
// attributes so the rest of the program stays baseline x86-64; called only when
// IsaSupported(Isa::kAvx2).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backends/cpu_blas/simd_kernels.h"
#include "model/dtype.h"

#define KVSERVE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace kvserve::backends::cpu_blas {
namespace {

// Weight element types: Load converts 8 consecutive elements to floats, One a single one.
struct F32W {
  using T = float;
  KVSERVE_AVX2 static __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
  static float One(float v) { return v; }
};
struct F16W {
  using T = uint16_t;
  KVSERVE_AVX2 static __m256 Load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float One(uint16_t v) { return model::HalfToFloat(v); }
};
struct BF16W {
  using T = uint16_t;
  // bf16 is the upper half of an f32: widen to 32 bits and shift left by 16 (exact).
  KVSERVE_AVX2 static __m256 Load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float One(uint16_t v) { return model::BF16ToFloat(v); }
};

KVSERVE_AVX2 inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 sh = _mm_movehdup_ps(s);
  s = _mm_add_ps(s, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}

// y[i * ldy + r] = W[r, :] · x[i, :] for r in [0, R), i in [0, N): R weight rows against
// N activation rows, R * N accumulators held in registers.
template <typename W, int R, int N>
KVSERVE_AVX2 inline void Block(const typename W::T* w, int64_t cols, const float* x, int64_t ldx,
                               float* y, int64_t ldy) {
  __m256 acc[R][N];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) acc[r][i] = _mm256_setzero_ps();
  }
  // The R rows are contiguous in memory. While reading them, prefetch the block two
  // blocks ahead at the same pace (one prefetch per 64-byte line): the hardware prefetcher
  // alone leaves a single core at about 9 GB/s on 16-bit weights, this reaches about 13.
  // Prefetching past the end of the matrix is harmless (a hint never faults).
  using T = typename W::T;
  // (Integer arithmetic: the address may lie past the end of the weights.)
  const uintptr_t ahead =
      reinterpret_cast<uintptr_t>(w) + static_cast<uintptr_t>(2 * R * cols) * sizeof(T);
  constexpr int kStepBytes = 8 * R * static_cast<int>(sizeof(T));
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
#pragma GCC unroll 4
    for (int b = 0; b < kStepBytes; b += 64) {
      _mm_prefetch(
          reinterpret_cast<const char*>(ahead + static_cast<uintptr_t>(c * R) * sizeof(T) + b),
          _MM_HINT_T0);
    }
    __m256 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = W::Load(w + r * cols + c);
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + c);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][i] = _mm256_fmadd_ps(wv[r], xv, acc[r][i]);
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
KVSERVE_AVX2 inline void BlockN(int nn, const typename W::T* w, int64_t cols, const float* x,
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

template <typename W>
KVSERVE_AVX2 void MatMul(const typename W::T* w, int64_t cols, int64_t row_begin, int64_t row_end,
                         const float* x, int64_t ldx, int n, float* y, int64_t ldy) {
  if (n == 1) {
    // Decode: four weight rows at a time keep four independent FMA chains in flight.
    int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) Block<W, 4, 1>(w + r * cols, cols, x, ldx, y + r, ldy);
    for (; r < row_end; ++r) Block<W, 1, 1>(w + r * cols, cols, x, ldx, y + r, ldy);
    return;
  }
  // Two weight rows (hot in L1) against activation rows in groups of four.
  for (int64_t r = row_begin; r < row_end; r += 2) {
    const bool pair = r + 2 <= row_end;
    for (int i = 0; i < n; i += 4) {
      const int nn = std::min(4, n - i);
      if (pair) {
        BlockN<W, 2>(nn, w + r * cols, cols, x + i * ldx, ldx, y + i * ldy + r, ldy);
      } else {
        BlockN<W, 1>(nn, w + r * cols, cols, x + i * ldx, ldx, y + i * ldy + r, ldy);
      }
    }
  }
}

KVSERVE_AVX2 float DotF32(const float* a, const float* b, int n) {
  __m256 s0 = _mm256_setzero_ps();
  __m256 s1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = HSum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

KVSERVE_AVX2 float DotF16(const float* a, const uint16_t* b, int n) {
  __m256 s0 = _mm256_setzero_ps();
  __m256 s1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), F16W::Load(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), F16W::Load(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), F16W::Load(b + i), s0);
  float s = HSum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * model::HalfToFloat(b[i]);
  return s;
}

KVSERVE_AVX2 void AxpyF32(float w, const float* x, float* y, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += w * x[i];
}

KVSERVE_AVX2 void AxpyF16(float w, const uint16_t* x, float* y, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, F16W::Load(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += w * model::HalfToFloat(x[i]);
}

template <typename W>
KVSERVE_AVX2 void Convert(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, W::Load(in + i));
  for (; i < n; ++i) out[i] = W::One(in[i]);
}

constexpr KernelSet kAvx2Set = {
    Isa::kAvx2, &MatMul<F32W>, &MatMul<F16W>, &MatMul<BF16W>, &DotF32,
    &DotF16,    &AxpyF32,      &AxpyF16,      &Convert<F16W>, &Convert<BF16W>,
};

}  // namespace

const KernelSet& Avx2Kernels() { return kAvx2Set; }

}  // namespace kvserve::backends::cpu_blas
