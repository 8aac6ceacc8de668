// KernelSet::matmul_q4_0_panels and matmul_q8_0_panels of the AVX2 and AVX-512 F levels:
// the 16-row panel layouts of model/panels.h (the same packed bytes the AVX-512 VNNI kernels
// read) in two 256-bit halves, with vpmaddubsw + vpmaddwd for the integer products. Not a
// normal header: simd_avx2.cc and simd_avx512.cc include it inside their anonymous
// namespace, after simd_quant_inl.h, with KVSERVE_SIMD_TARGET defined.
//
// Why: the row-major AVX2 kernels decode and sum each row's blocks on their own (about 15
// instructions per 18-byte q4_0 block, then horizontal sums), which keeps batch-1 decode of
// the 4-bit files at about half the bandwidth bound on AVX2 machines (docs/performance.md,
// "AVX2: Zen 3"). A panel line holds 4 columns of 16 rows, so one vpmaddubsw multiplies 8
// rows' 4 codes by one broadcast activation word, the lanes are the rows (no horizontal
// sums), a q4_0 line's nibbles are unpacked once for every activation row, and per
// 32 columns one f16 scale vector serves all rows.
//
// Exactness, and equality with the VNNI kernels: every block's integer sum is exact, and
// the float steps per (row, activation row, block) are those of simd_quant_panels_inl.h's
// Block32 (the scale product, one multiply-add into the accumulator), so the results are
// bit for bit those of the AVX-512 VNNI panel kernels. q4_0: codes 0..15 against |x| <=
// 127 give pair sums <= 3,810, and the 8 operands of a block add up to <= 30,480 in int16
// before one vpmaddwd widens them; q8_0: vpmaddubsw of |w| (<= 128) and x with w's sign
// (vpsignb) stays <= 32,512 per pair, widened per operand.

// The 16 rows of a panel in two 256-bit accumulators (rows 0-7, 8-15).
struct Ymm16Lanes {
  struct Acc {
    __m256 half[2];
  };
  // Activation rows per pass: each row takes 2 float accumulators and 2 integer sums, so 3
  // rows and the operands fill the 16 registers.
  static constexpr int kMaxRows = 3;
  static constexpr int Panels(int m) { return m == 1 ? 2 : 1; }
  KVSERVE_SIMD_TARGET static Acc Zero() { return Acc{{_mm256_setzero_ps(), _mm256_setzero_ps()}}; }
  KVSERVE_SIMD_TARGET static void Store(float* y, const Acc& a) {
    _mm256_storeu_ps(y, a.half[0]);
    _mm256_storeu_ps(y + 8, a.half[1]);
  }
};

// Broadcast of 4-byte word k of `p` (activation codes).
KVSERVE_SIMD_TARGET inline __m256i WordAt256(const void* p, int k) {
  int32_t word;
  std::memcpy(&word, static_cast<const uint8_t*>(p) + 4 * k, 4);
  return _mm256_set1_epi32(word);
}

// acc[m].half[h] += float(sum[m][h]) * (the rows' f16 scales . d of activation row m),
// as Block32 (simd_quant_panels_inl.h) computes it.
template <int M>
KVSERVE_SIMD_TARGET inline void AddBlock32(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                           int64_t b, __m256i (*sum)[2], Ymm16Lanes::Acc* acc) {
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + 16 * h)));
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(XAt<Q8Block>(x, ldxq, m, b).d));
      acc[m].half[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[m][h]), d, acc[m].half[h]);
    }
  }
}

// What the two 32-element formats share: one f16 scale per row and block.
struct Ymm16Block32 : Ymm16Lanes {
  static constexpr int64_t kElems = 32;
  static constexpr int64_t kPrefetchBlocks = 4;
  static constexpr bool kMultiPanel = true;
};

// q4_0: element = d * (code - 8); line j (columns 4j.. in the low nibbles, 16 + 4j.. in
// the high ones) at pb + 32 + 64 j.
struct Q4_0PanelAvx2 : Ymm16Block32 {
  static constexpr int64_t kBlockBytes = model::kQ4_0PanelBlockBytes;
  template <int M>
  KVSERVE_SIMD_TARGET static void Accumulate(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                             int64_t b, Acc* acc) {
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256i pairs[M][2];  // int16 pair sums of the 8 operands
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) pairs[m][0] = pairs[m][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i packed = Load256(pb + 32 + 64 * j + 32 * h);
        const __m256i lo = _mm256_and_si256(packed, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) {
          const Q8Block& xb = XAt<Q8Block>(x, ldxq, m, b);
          pairs[m][h] = _mm256_add_epi16(pairs[m][h], _mm256_maddubs_epi16(lo, WordAt256(xb.q, j)));
          pairs[m][h] =
              _mm256_add_epi16(pairs[m][h], _mm256_maddubs_epi16(hi, WordAt256(xb.q, 4 + j)));
        }
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i sum[M][2];
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      const __m256i offset = _mm256_set1_epi32(-8 * XAt<Q8Block>(x, ldxq, m, b).sum);
      for (int h = 0; h < 2; ++h) {
        sum[m][h] = _mm256_add_epi32(_mm256_madd_epi16(pairs[m][h], ones), offset);
      }
    }
    AddBlock32<M>(pb, x, ldxq, b, sum, acc);
  }
};

// q8_0: element = d * code (signed); line j (columns 4j ..) at pb + 32 + 64 j.
struct Q8_0PanelAvx2 : Ymm16Block32 {
  static constexpr int64_t kBlockBytes = model::kQ8_0PanelBlockBytes;
  template <int M>
  KVSERVE_SIMD_TARGET static void Accumulate(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                             int64_t b, Acc* acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i sum[M][2];
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) sum[m][0] = sum[m][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i w = Load256(pb + 32 + 64 * j + 32 * h);
        const __m256i magnitude = _mm256_abs_epi8(w);
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) {
          const __m256i xs = _mm256_sign_epi8(WordAt256(XAt<Q8Block>(x, ldxq, m, b).q, j), w);
          sum[m][h] = _mm256_add_epi32(
              sum[m][h], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, xs), ones));
        }
      }
    }
    AddBlock32<M>(pb, x, ldxq, b, sum, acc);
  }
};

#include "backends/cpu_blas/simd_quant_panel_driver_inl.h"  // NOLINT(build/include)

// The 256-bit panel kernels (the k-quants' are VNNI-only).
constexpr KernelSet WithYmmQuantPanelKernels(KernelSet k) {
  k.matmul_q4_0_panels = &MatMulQuantPanels<Q4_0PanelAvx2>;
  k.matmul_q8_0_panels = &MatMulQuantPanels<Q8_0PanelAvx2>;
  return k;
}
