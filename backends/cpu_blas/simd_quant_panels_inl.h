// KernelSet::matmul_q4_0_panels: q4_0 weights in the 16-row panel layout (model/panels.h)
// against Q8Block activation rows, in 512-bit vectors with vpdpbusd. Not a normal header:
// simd_avx512_vnni.cc includes it inside its anonymous namespace, with
// KVSERVE_SIMD_TARGET defined.
//
// Why: in the panel layout one 64-byte line holds 4 columns of all 16 rows of a panel, so
// one vpdpbusd multiplies it (after a mask or a shift of the nibbles) by one activation
// word broadcast to every lane, and the 16 lanes of the accumulator are the 16 rows: no
// per-step decode of the weights into a scratch panel, no horizontal sums, and per 32
// columns one f16 scale vector converted for all activation rows. A tile of P panels x M
// activation rows keeps its float accumulators in registers over the whole row; per
// (panel, row, block) it spends 8 vpdpbusd and 3 float instructions (the row-major tiles
// of simd_quant_tiles_inl.h: 4 and 3, besides decoding).
//
// Exactness: the integer block sums are exact (|sum| <= 32 * 15 * 127 + 8 * 32 * 127);
// the scales (f16 d_w times f32 d_x) and the final sums round as in the other kernels,
// in another order.

// Bytes ahead of the current panel block that each panel stream prefetches (64 blocks,
// about 18 KiB), and the panels processed per pass over the activation rows (about
// 256 KiB of weights, which stay in L2 for the next group of rows). Standalone copy of
// the kernel, 16 rows, 2 threads, Zen 5: slabs of 64 KiB 686–726 Gop/s, 256 KiB
// 725–756, 1 MiB 660–717.
constexpr int64_t kQ4_0PanelPrefetchBytes = 64 * model::kQ4_0PanelBlockBytes;
constexpr int64_t kQ4_0PanelSlabBytes = 256 * 1024;
// Activation rows per pass: 8 float accumulators and 8 integer chains (the tile 2 x 8
// spilled and ran at two thirds of the rate; 6 rows per pass were slower).
constexpr int kQ4_0PanelMaxRows = 8;

// y[m * ldy + 16 p + r] = row r of panel p . activation row m, for p < P, m < M; `panel`
// the first block of panel 0 (panels `pstride` bytes apart), x the first Q8Block of
// activation row 0 (rows ldxq bytes apart).
template <int P, int M>
KVSERVE_SIMD_TARGET void Q4_0PanelTile(const uint8_t* panel, int64_t pstride, int64_t blocks,
                                       const uint8_t* x, int64_t ldxq, float* y, int64_t ldy) {
  __m512 acc[P][M];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) acc[p][m] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi8(15);
  for (int64_t b = 0; b < blocks; ++b) {
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const uint8_t* pb = panel + p * pstride + b * model::kQ4_0PanelBlockBytes;
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(pb) + kQ4_0PanelPrefetchBytes;
#pragma GCC unroll 5
      for (int line = 0; line < 5; ++line) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * line), _MM_HINT_T0);
      }
      // The integer chains start at -8 sum(x): the codes are w / d + 8. (Read from a
      // per-call table of -8 sum instead, the tile ran 3-5 % slower at 16 rows.)
      __m512i sum[M];
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        sum[m] = _mm512_set1_epi32(-8 * XAt<Q8Block>(x, ldxq, m, b).sum);
      }
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m512i packed = _mm512_loadu_si512(pb + 32 + 64 * j);
        const __m512i lo = _mm512_and_si512(packed, low4);                        // 4j..
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);  // 16 + 4j..
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          const int8_t* q = XAt<Q8Block>(x, ldxq, m, b).q;
          int32_t word_lo;
          int32_t word_hi;
          std::memcpy(&word_lo, q + 4 * j, 4);
          std::memcpy(&word_hi, q + 16 + 4 * j, 4);
          sum[m] = _mm512_dpbusd_epi32(sum[m], lo, _mm512_set1_epi32(word_lo));
          sum[m] = _mm512_dpbusd_epi32(sum[m], hi, _mm512_set1_epi32(word_hi));
        }
      }
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
template <int M>
KVSERVE_SIMD_TARGET void Q4_0PanelRows(const uint8_t* w, int64_t pstride, int64_t blocks,
                                       int64_t p0, int64_t p1, const uint8_t* x, int64_t ldxq,
                                       float* y, int64_t ldy) {
  constexpr int P = M <= 2 ? 4 : M <= 4 ? 2 : 1;
  int64_t p = p0;
  for (; p + P <= p1; p += P) {
    Q4_0PanelTile<P, M>(w + p * pstride, pstride, blocks, x, ldxq, y + 16 * p, ldy);
  }
  for (; p < p1; ++p) {
    Q4_0PanelTile<1, M>(w + p * pstride, pstride, blocks, x, ldxq, y + 16 * p, ldy);
  }
}

KVSERVE_SIMD_TARGET void MatMulQ4_0Panels(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                          int64_t row_begin, int64_t row_end, const void* xq,
                                          int64_t ldxq, int n, float* y, int64_t ldy) {
  using RowsFn = void (*)(const uint8_t*, int64_t, int64_t, int64_t, int64_t, const uint8_t*,
                          int64_t, float*, int64_t);
  static constexpr RowsFn kRows[kQ4_0PanelMaxRows + 1] = {
      nullptr,           &Q4_0PanelRows<1>, &Q4_0PanelRows<2>, &Q4_0PanelRows<3>, &Q4_0PanelRows<4>,
      &Q4_0PanelRows<5>, &Q4_0PanelRows<6>, &Q4_0PanelRows<7>, &Q4_0PanelRows<8>};
  const int64_t blocks = cols / model::kQ4_0BlockElems;
  const int64_t pstride = model::kPanelRows * row_bytes;  // the same bytes, regrouped
  const int64_t slab = std::max<int64_t>(1, kQ4_0PanelSlabBytes / pstride);
  const uint8_t* x = static_cast<const uint8_t*>(xq);
  for (int64_t s0 = row_begin / model::kPanelRows; s0 < row_end / model::kPanelRows; s0 += slab) {
    const int64_t s1 = std::min(row_end / model::kPanelRows, s0 + slab);
    for (int i = 0; i < n; i += kQ4_0PanelMaxRows) {
      const int m = std::min(kQ4_0PanelMaxRows, n - i);
      kRows[m](w, pstride, blocks, s0, s1, x + i * ldxq, ldxq, y + i * ldy, ldy);
    }
  }
}

// The panel kernel, added to a KernelSet of the VNNI level or above.
inline KernelSet WithQuantPanelKernels(KernelSet k) {
  k.matmul_q4_0_panels = &MatMulQ4_0Panels;
  return k;
}
