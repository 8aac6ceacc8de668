// Horizontal sums of four float vectors at once, for the epilogues of the register-tiled
// kernels: a tile of R x C accumulators ends with R * C horizontal sums, and summing them
// four at a time takes 13 instructions instead of 4 x 8 (by count of the code below): in
// a tile's epilogue, single sums would add a large share to the instructions of its loop.
// Each function is compiled for its own instruction set and is inlined into the callers
// of its level (whose target attributes include it); call it only on such a CPU.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_SIMD_HSUM_H_
#define KVSERVE_BACKENDS_CPU_BLAS_SIMD_HSUM_H_

#include <immintrin.h>

namespace kvserve::backends::cpu_blas {

// s0 + s1 + s2 + s3 of a 4-lane vector, as (s0 + s1) + (s2 + s3): the last steps of the
// single horizontal sums (V::HSum) of the AVX2 and AVX-512 levels, whose order every
// level keeps (compiled VEX-encoded, as the callers).
__attribute__((target("avx"))) inline float HSum128(__m128 s) {
  __m128 sh = _mm_movehdup_ps(s);
  s = _mm_add_ps(s, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}

// [sum(a), sum(b), sum(c), sum(d)] of four 8-lane vectors (AVX).
__attribute__((target("avx"))) inline __m128 HSum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] and the same for c, d.
  const __m256 ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
  const __m256 cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
  // Per 128-bit lane: [a, b, c, d] partial sums.
  const __m256 abcd = _mm256_add_ps(
      _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(ab), _mm256_castps_pd(cd))),
      _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(ab), _mm256_castps_pd(cd))));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// [sum(a), sum(b), sum(c), sum(d)] of four 16-lane vectors (AVX-512 F).
__attribute__((target("avx512f"))) inline __m128 HSum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 abcd = _mm512_add_ps(
      _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))),
      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))));
  const __m256 s8 =
      _mm256_add_ps(_mm512_castps512_ps256(abcd),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
}

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_SIMD_HSUM_H_
