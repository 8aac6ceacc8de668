// KernelSet::matmul_q4_0_panels and matmul_q8_0_panels: q4_0 and q8_0 weights in the
// 16-row panel layouts (model/panels.h) against Q8Block activation rows, in 512-bit
// vectors with vpdpbusd. Not a normal header: simd_avx512_vnni.cc includes it inside its
// anonymous namespace, with KVSERVE_SIMD_TARGET defined.
//
// Why: in the panel layouts one 64-byte line holds 4 columns of all 16 rows of a panel, so
// one vpdpbusd multiplies it (q4_0: after a mask or a shift of the nibbles; q8_0: after
// flipping the sign bit, w + 128) by one activation word broadcast to every lane, and the
// 16 lanes of the accumulator are the 16 rows: no per-step decode of the weights into a
// scratch panel, no horizontal sums, and per 32 columns one f16 scale vector converted
// for all activation rows. A tile of P panels x M activation rows keeps its float
// accumulators in registers over the whole row; per (panel, row, block) it spends 8
// vpdpbusd and 3 float instructions (the row-major tiles of simd_quant_tiles_inl.h: 4
// and 3, besides decoding).
//
// Exactness: the integer block sums are exact (|sum| <= 32 * 255 * 127 + 128 * 32 * 127);
// the scales (f16 d_w times f32 d_x) and the final sums round as in the other kernels,
// in another order.

// The panels processed per pass over the activation rows (about 256 KiB of weights, which
// stay in L2 for the next group of rows). Standalone copy of the q4_0 kernel, 16 rows, 2
// threads, Zen 5: slabs of 64 KiB 686–726 Gop/s, 256 KiB 725–756, 1 MiB 660–717.
constexpr int64_t kPanelSlabBytes = 256 * 1024;
// Panel blocks ahead of the current one that each panel stream prefetches (q4_0: about
// 18 KiB).
constexpr int64_t kPanelPrefetchBlocks = 64;
// Activation rows per pass: 8 float accumulators and 8 integer chains (the tile 2 x 8
// spilled and ran at two thirds of the rate; 6 rows per pass were slower).
constexpr int kPanelMaxRows = 8;

// The formats: a panel block's bytes, the codes' offset (element = d * (code - offset)
// with unsigned codes) and its 8 vpdpbusd operands, operand k (columns 4k .. 4k + 3 of the
// block, all 16 rows) handed to fn(k, operand).
struct Q4_0Panel {
  static constexpr int64_t kBlockBytes = model::kQ4_0PanelBlockBytes;
  static constexpr int32_t kOffset = 8;
  template <typename Fn>
  KVSERVE_SIMD_TARGET static void ForOperands(const uint8_t* pb, const Fn& fn) {
    const __m512i low4 = _mm512_set1_epi8(15);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512i packed = _mm512_loadu_si512(pb + 32 + 64 * j);
      fn(j, _mm512_and_si512(packed, low4));                            // columns 4j ..
      fn(4 + j, _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4));  // 16 + 4j ..
    }
  }
};

struct Q8_0Panel {
  static constexpr int64_t kBlockBytes = model::kQ8_0PanelBlockBytes;
  static constexpr int32_t kOffset = 128;
  template <typename Fn>
  KVSERVE_SIMD_TARGET static void ForOperands(const uint8_t* pb, const Fn& fn) {
    const __m512i sign = _mm512_set1_epi8(-128);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) fn(j, _mm512_xor_si512(_mm512_loadu_si512(pb + 32 + 64 * j), sign));
  }
};

// y[m * ldy + 16 p + r] = row r of panel p . activation row m, for p < P, m < M; `panel`
// the first block of panel 0 (panels `pstride` bytes apart), x the first Q8Block of
// activation row 0 (rows ldxq bytes apart).
template <typename F, int P, int M>
KVSERVE_SIMD_TARGET void QuantPanelTile(const uint8_t* panel, int64_t pstride, int64_t blocks,
                                        const uint8_t* x, int64_t ldxq, float* y, int64_t ldy) {
  __m512 acc[P][M];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) acc[p][m] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const uint8_t* pb = panel + p * pstride + b * F::kBlockBytes;
      const uintptr_t ahead =
          reinterpret_cast<uintptr_t>(pb) + kPanelPrefetchBlocks * F::kBlockBytes;
#pragma GCC unroll 9
      for (int64_t line = 0; line < (F::kBlockBytes + 63) / 64; ++line) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * line), _MM_HINT_T0);
      }
      // The integer chains start at -offset sum(x). (Read from a per-call table of
      // -offset sum instead, the q4_0 tile ran 3-5 % slower at 16 rows.)
      __m512i sum[M];
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        sum[m] = _mm512_set1_epi32(-F::kOffset * XAt<Q8Block>(x, ldxq, m, b).sum);
      }
      F::ForOperands(pb, [&](int k, __m512i w) KVSERVE_SIMD_TARGET {
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          int32_t word;
          std::memcpy(&word, XAt<Q8Block>(x, ldxq, m, b).q + 4 * k, 4);
          sum[m] = _mm512_dpbusd_epi32(sum[m], w, _mm512_set1_epi32(word));
        }
      });
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb)));
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(XAt<Q8Block>(x, ldxq, m, b).d));
        acc[p][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[m]), d, acc[p][m]);
      }
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) _mm512_storeu_ps(y + m * ldy + 16 * p, acc[p][m]);
  }
}

// Panels [p0, p1) against M activation rows: P panels per tile (more panel streams when
// few rows keep the accumulators busy), then single panels.
template <typename F, int M>
KVSERVE_SIMD_TARGET void QuantPanelRows(const uint8_t* w, int64_t pstride, int64_t blocks,
                                        int64_t p0, int64_t p1, const uint8_t* x, int64_t ldxq,
                                        float* y, int64_t ldy) {
  constexpr int P = M <= 2 ? 4 : M <= 4 ? 2 : 1;
  int64_t p = p0;
  for (; p + P <= p1; p += P) {
    QuantPanelTile<F, P, M>(w + p * pstride, pstride, blocks, x, ldxq, y + 16 * p, ldy);
  }
  for (; p < p1; ++p)
    QuantPanelTile<F, 1, M>(w + p * pstride, pstride, blocks, x, ldxq, y + 16 * p, ldy);
}

// QMatMulFn over a panel layout of format F: slabs of panels, each against the
// activation rows in groups of up to kPanelMaxRows.
template <typename F>
KVSERVE_SIMD_TARGET void MatMulQuantPanels(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                           int64_t row_begin, int64_t row_end, const void* xq,
                                           int64_t ldxq, int n, float* y, int64_t ldy) {
  using RowsFn = void (*)(const uint8_t*, int64_t, int64_t, int64_t, int64_t, const uint8_t*,
                          int64_t, float*, int64_t);
  static constexpr RowsFn kRows[kPanelMaxRows + 1] = {nullptr,
                                                      &QuantPanelRows<F, 1>,
                                                      &QuantPanelRows<F, 2>,
                                                      &QuantPanelRows<F, 3>,
                                                      &QuantPanelRows<F, 4>,
                                                      &QuantPanelRows<F, 5>,
                                                      &QuantPanelRows<F, 6>,
                                                      &QuantPanelRows<F, 7>,
                                                      &QuantPanelRows<F, 8>};
  const int64_t blocks = cols / 32;
  const int64_t pstride = model::kPanelRows * row_bytes;  // the same bytes, regrouped
  const int64_t slab = std::max<int64_t>(1, kPanelSlabBytes / pstride);
  const uint8_t* x = static_cast<const uint8_t*>(xq);
  const int64_t end = row_end / model::kPanelRows;
  for (int64_t s0 = row_begin / model::kPanelRows; s0 < end; s0 += slab) {
    const int64_t s1 = std::min(end, s0 + slab);
    for (int i = 0; i < n; i += kPanelMaxRows) {
      const int m = std::min(kPanelMaxRows, n - i);
      kRows[m](w, pstride, blocks, s0, s1, x + i * ldxq, ldxq, y + i * ldy, ldy);
    }
  }
}

// The panel kernels, added to a KernelSet of the VNNI level or above.
inline KernelSet WithQuantPanelKernels(KernelSet k) {
  k.matmul_q4_0_panels = &MatMulQuantPanels<Q4_0Panel>;
  k.matmul_q8_0_panels = &MatMulQuantPanels<Q8_0Panel>;
  return k;
}
