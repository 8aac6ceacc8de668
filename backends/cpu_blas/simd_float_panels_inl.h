// The float panel kernels, KernelSet::matmul_f32_panels, matmul_bf16_panels,
// matmul_bf16_panels_fma and matmul_bf16_panels_exact: weights in the f32 or bf16 panel layout
// (model/panels.h) against float or bf16 activation rows, in 512-bit vectors (one per line) or
// 256-bit ones (two per line). Not a normal header: simd_avx2.cc, simd_avx512.cc and
// simd_avx512_bf16.cc include it inside their anonymous namespace, with KVSERVE_SIMD_TARGET
// defined, each with its formats.
//
// In both layouts one 64-byte line holds one 4-byte word of all 16 rows of a panel (f32: a
// column; bf16: a column pair). One multiply-add (vfmadd231ps; vdpbf16ps; two 256-bit
// vfmadd231ps) takes a line and that word of one activation row broadcast to every lane, so
// every weight is loaded once per pass for all M activation rows, the panels stream in
// address order, and the 16 lanes of an accumulator are the 16 rows: no horizontal sums.
// Each output is one chain of multiply-adds over the columns in order, whatever the number
// of activation rows, so a sequence's results do not depend on its batch. Against the row
// layout of simd_avx512_bf16.cc (several passes of a few activation rows over each group of
// weight rows, then horizontal sums) this reads the weights fewer times and in one stream,
// which is why it wins at batch 1 (memory-bound) and at most larger batches (bench/
// kernels_bench.cc BM_Gemm bf16_dot:1 vs 2; docs/performance.md, "Weights in 16-row
// panels").
//
// A format provides
//   Weight, Act                 the element types of the weights and the activations
//   kCols                       columns per 4-byte word (f32 1, bf16 2)
//   Vec                         the vector type of a line
//   Acc                         the accumulator of one panel's 16 rows
//   static Vec Line(const Weight* at)            the line at `at`
//   static auto Broadcast(const Act* at)         the word at `at`, in every lane
//   static Acc Madd(Acc acc, Vec w, word x)      acc + the products of w and x, per lane
//   static Acc Zero(), static void Store(float* y, Acc acc)    y[0, 16) = acc
//   kPassRows                   activation rows per pass over a block of panels
//   static constexpr int Panels(int m)           panels per tile for m <= kPassRows rows
// (Vec may be a struct of vectors: the widening bf16 formats widen a line to two (four in
// 256-bit halves), the 256-bit f32 format holds a line in two. simd_float_panels_zmm_inl.h has the
// 512-bit Acc and tiling.)

static_assert(model::kPanelRows == 16,
              "one panel line is 64 bytes: one 512-bit vector, two 256-bit");
// Panel lines read ahead of the one in use, per panel stream: 4 KiB, about as far as the
// memory latency at the rate of a full pass. Less leaves the loads waiting on memory;
// more gained nothing for bf16 and cost f32 (its lines are consumed at half the rate, so
// the far prefetches crowd out lines still in use).
constexpr int64_t kFloatPanelPrefetchLines = 64;
// Panels per block: every activation row goes over one block before the next, so a block
// (about this many bytes) stays in L2 for all rows of a prefill.
constexpr int64_t kFloatPanelBlockBytes = 256 << 10;

// y[m * ldy + 16 p + j] = sum_c W[16 p + j, c] * X[m, c] for p in [0, P), m in [0, M),
// j in [0, 16): P panels from w (panel_elems apart, `words` lines each) against M
// activation rows.
template <typename F, int P, int M>
KVSERVE_SIMD_TARGET void FloatPanelTile(const typename F::Weight* w, int64_t panel_elems,
                                        int64_t words, const typename F::Act* x, int64_t ldx,
                                        float* y, int64_t ldy) {
  constexpr int64_t kLineElems = F::kCols * model::kPanelRows;
  typename F::Acc acc[P][M];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) acc[p][m] = F::Zero();
  }
  // (Integer arithmetic: the prefetched address may lie past the end of the weights; a
  // hint never faults.)
  const uintptr_t base = reinterpret_cast<uintptr_t>(w);
  for (int64_t k = 0; k < words; ++k) {
    typename F::Vec wv[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const int64_t at = p * panel_elems + k * kLineElems;
      _mm_prefetch(reinterpret_cast<const char*>(
                       base + static_cast<uintptr_t>(at + kFloatPanelPrefetchLines * kLineElems) *
                                  sizeof(typename F::Weight)),
                   _MM_HINT_T0);
      wv[p] = F::Line(w + at);
    }
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      const auto xv = F::Broadcast(x + m * ldx + F::kCols * k);
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) acc[p][m] = F::Madd(acc[p][m], wv[p], xv);
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) F::Store(y + m * ldy + p * model::kPanelRows, acc[p][m]);
  }
}

// Panels [p0, p1) against M <= F::kPassRows activation rows, F::Panels(M) panels per tile.
template <typename F, int M>
KVSERVE_SIMD_TARGET void FloatPanelRows(const typename F::Weight* w, int64_t panel_elems,
                                        int64_t words, int64_t p0, int64_t p1,
                                        const typename F::Act* x, int64_t ldx, float* y,
                                        int64_t ldy) {
  static_assert(M <= F::kPassRows);
  constexpr int P = F::Panels(M);
  int64_t p = p0;
  for (; p + P <= p1; p += P) {
    FloatPanelTile<F, P, M>(w + p * panel_elems, panel_elems, words, x, ldx,
                            y + p * model::kPanelRows, ldy);
  }
  // The rest (fewer than P panels) in pairs, then alone: a lone panel of few activation
  // rows is one short chain of multiply-adds per row.
  if constexpr (P > 2) {
    for (; p + 2 <= p1; p += 2) {
      FloatPanelTile<F, 2, M>(w + p * panel_elems, panel_elems, words, x, ldx,
                              y + p * model::kPanelRows, ldy);
    }
  }
  for (; p < p1; ++p) {
    FloatPanelTile<F, 1, M>(w + p * panel_elems, panel_elems, words, x, ldx,
                            y + p * model::kPanelRows, ldy);
  }
}

// FloatPanelRows<F, m> for a run-time m in [1, F::kPassRows].
template <typename F, int... Ms>
KVSERVE_SIMD_TARGET void FloatPanelRowsOf(int m, const typename F::Weight* w, int64_t panel_elems,
                                          int64_t words, int64_t p0, int64_t p1,
                                          const typename F::Act* x, int64_t ldx, float* y,
                                          int64_t ldy, std::integer_sequence<int, Ms...>) {
  ((m == Ms + 1 ? FloatPanelRows<F, Ms + 1>(w, panel_elems, words, p0, p1, x, ldx, y, ldy)
                : void()),
   ...);
}

// y[i * ldy + r] = sum_c W[r, c] * X[i, c] for r in [row_begin, row_end), i in [0, n), W in
// F's panel layout: the panels in blocks of about kFloatPanelBlockBytes, each block against
// F::kPassRows activation rows at a time.
template <typename F>
KVSERVE_SIMD_TARGET void MatMulFloatPanels(const typename F::Weight* w, int64_t cols,
                                           int64_t row_begin, int64_t row_end,
                                           const typename F::Act* x, int64_t ldx, int n, float* y,
                                           int64_t ldy) {
  const int64_t panel_elems = model::kPanelRows * cols;
  const int64_t words = cols / F::kCols;
  const int64_t p_end = row_end / model::kPanelRows;
  // One pass reads every panel once, in any order: no blocks. More passes: blocks of an
  // even number of panels (the full passes' tiles take 2), at least 2 even where a panel
  // alone is larger than kFloatPanelBlockBytes (5632 f32 columns: 352 KiB), so that no
  // pass runs in tiles of one panel.
  const int64_t panel_bytes = panel_elems * static_cast<int64_t>(sizeof(typename F::Weight));
  const int64_t block =
      n <= F::kPassRows ? p_end : std::max<int64_t>(2, kFloatPanelBlockBytes / panel_bytes / 2 * 2);
  for (int64_t b0 = row_begin / model::kPanelRows; b0 < p_end; b0 += block) {
    const int64_t b1 = std::min(p_end, b0 + block);
    for (int i = 0; i < n; i += F::kPassRows) {
      FloatPanelRowsOf<F>(std::min(F::kPassRows, n - i), w, panel_elems, words, b0, b1, x + i * ldx,
                          ldx, y + i * ldy, ldy, std::make_integer_sequence<int, F::kPassRows>());
    }
  }
}
