// The tile driver of the quantized panel kernels (KernelSet::matmul_q4_0_panels, ...):
// slabs of panels against groups of activation rows, tiles of P panels x M rows, whatever
// the vector width. Not a normal header: simd_quant_panels_inl.h (512-bit, VNNI) and
// simd_quant_panels_avx2_inl.h (256-bit) include it inside their anonymous namespace, with
// KVSERVE_SIMD_TARGET defined, after their formats.
//
// A format F (panel block -> accumulators) provides, besides Accumulate<M> and the block
// constants that simd_quant_panels_inl.h lists, its lane traits:
//   Acc                              the accumulator of one panel's 16 rows (one 512-bit
//                                    vector, or two 256-bit halves)
//   static Acc Zero(), static void Store(float* y, Acc)   y[0, 16) = the accumulator
//   kMaxRows                         activation rows per pass (what the registers hold)
//   static constexpr int Panels(int m)   panels per tile for m rows (kMultiPanel formats)
//
// Every output is one chain of per-block float multiply-adds over the blocks in order, in
// whichever tile and pass its row lands: results do not depend on the number of rows.

// The panels processed per pass over the activation rows (about 256 KiB of weights, which
// stay in L2 for the next group of rows): smaller slabs restart the weight streams more
// often, larger ones no longer fit L2 beside the activations; 256 KiB measured best of
// 64 KiB, 256 KiB and 1 MiB (512-bit kernels).
constexpr int64_t kPanelSlabBytes = 256 * 1024;

// y[m * ldy + 16 p + r] = row r of panel p . activation row m, for p < P, m < M; `panel`
// the first block of panel 0 (panels `pstride` bytes apart), x the first block of
// activation row 0 (rows ldxq bytes apart). kPrefetchL2: the weights are prefetched into
// L2 instead of L1 (MatMulQuantPanels says when), F::kPrefetchBlocksL2 blocks ahead instead
// of F::kPrefetchBlocks.
template <typename F, int P, int M, bool kPrefetchL2 = false>
KVSERVE_SIMD_TARGET void QuantPanelTile(const uint8_t* panel, int64_t pstride, int64_t blocks,
                                        const uint8_t* x, int64_t ldxq, float* y, int64_t ldy) {
  constexpr auto kHint = kPrefetchL2 ? _MM_HINT_T1 : _MM_HINT_T0;
  constexpr int64_t kAhead = kPrefetchL2 ? F::kPrefetchBlocksL2 : F::kPrefetchBlocks;
  typename F::Acc acc[P][M];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) acc[p][m] = F::Zero();
  }
  for (int64_t b = 0; b < blocks; ++b) {
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const uint8_t* pb = panel + p * pstride + b * F::kBlockBytes;
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(pb) + kAhead * F::kBlockBytes;
#pragma GCC unroll 9
      for (int64_t line = 0; line < (F::kBlockBytes + 63) / 64; ++line) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * line), kHint);
      }
      F::template Accumulate<M>(pb, x, ldxq, b, acc[p]);
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) F::Store(y + m * ldy + 16 * p, acc[p][m]);
  }
}

// Panels [p0, p1) against M activation rows: P panels per tile (for F::kMultiPanel, more
// panel streams when few rows keep the accumulators busy), the rest in pairs, then
// single panels.
template <typename F, int M, bool kPrefetchL2 = false>
KVSERVE_SIMD_TARGET void QuantPanelRows(const uint8_t* w, int64_t pstride, int64_t blocks,
                                        int64_t p0, int64_t p1, const uint8_t* x, int64_t ldxq,
                                        float* y, int64_t ldy) {
  constexpr int P = !F::kMultiPanel ? 1 : F::Panels(M);
  int64_t p = p0;
  for (; p + P <= p1; p += P) {
    QuantPanelTile<F, P, M, kPrefetchL2>(w + p * pstride, pstride, blocks, x, ldxq, y + 16 * p,
                                         ldy);
  }
  if constexpr (P > 2) {
    for (; p + 2 <= p1; p += 2) {
      QuantPanelTile<F, 2, M, kPrefetchL2>(w + p * pstride, pstride, blocks, x, ldxq, y + 16 * p,
                                           ldy);
    }
  }
  for (; p < p1; ++p)
    QuantPanelTile<F, 1, M, kPrefetchL2>(w + p * pstride, pstride, blocks, x, ldxq, y + 16 * p,
                                         ldy);
}

// QuantPanelRows<F, m> for a run-time m in [1, F::kMaxRows].
template <typename F, int... Ms>
KVSERVE_SIMD_TARGET void QuantPanelRowsOf(int m, const uint8_t* w, int64_t pstride, int64_t blocks,
                                          int64_t p0, int64_t p1, const uint8_t* x, int64_t ldxq,
                                          float* y, int64_t ldy,
                                          std::integer_sequence<int, Ms...>) {
  ((m == Ms + 1 ? QuantPanelRows<F, Ms + 1>(w, pstride, blocks, p0, p1, x, ldxq, y, ldy) : void()),
   ...);
}

// QMatMulFn over a panel layout of format F: slabs of panels, each against the
// activation rows in groups of up to F::kMaxRows.
template <typename F>
KVSERVE_SIMD_TARGET void MatMulQuantPanels(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                           int64_t row_begin, int64_t row_end, const void* xq,
                                           int64_t ldxq, int n, float* y, int64_t ldy) {
  const int64_t blocks = cols / F::kElems;
  const int64_t pstride = model::kPanelRows * row_bytes;  // the same bytes, regrouped
  const uint8_t* x = static_cast<const uint8_t*>(xq);
  const int64_t end = row_end / model::kPanelRows;
  // One activation row (batch-1 decode): the weights come from memory and are read once.
  // Where their prefetches should bring them depends on the CPU (Batch1PrefetchIntoL2): on
  // Intel Emerald Rapids into L2 (into L1, perf put most of the k-quant kernels' samples on
  // their prefetcht0 bursts; tl1b Q4_K_M decoded at 71-77 % of the paired bandwidth bound at
  // avx2, 80-81 % at avx512vnni, into L2 at 82-86 % and 88-92 %), on AMD Zen 5 into L1
  // (into L2, s110m and tl1b Q4_K_M decoded 4-23 % slower at avx512bf16 and avx2, s110m
  // q4_0 and q8_0 mostly slower). Products of several rows (prefill, batched decode: passes over a
  // slab of weights that stays in L2) prefetch into L1 everywhere: the L2 hint there measured a few
  // percent slower. docs/performance.md, "Quantized panel kernels: compiler barriers,
  // batch-1 prefetch hint".
  if (n == 1) {
    const int64_t p0 = row_begin / model::kPanelRows;
    if (Batch1PrefetchIntoL2()) {
      QuantPanelRows<F, 1, /*kPrefetchL2=*/true>(w, pstride, blocks, p0, end, x, ldxq, y, ldy);
    } else {
      QuantPanelRows<F, 1>(w, pstride, blocks, p0, end, x, ldxq, y, ldy);
    }
    return;
  }
  // One pass reads every panel once: no slabs (whose ends would split the tiles).
  const int64_t slab = n <= F::kMaxRows ? end : std::max<int64_t>(1, kPanelSlabBytes / pstride);
  for (int64_t s0 = row_begin / model::kPanelRows; s0 < end; s0 += slab) {
    const int64_t s1 = std::min(end, s0 + slab);
    for (int i = 0; i < n; i += F::kMaxRows) {
      QuantPanelRowsOf<F>(std::min(F::kMaxRows, n - i), w, pstride, blocks, s0, s1, x + i * ldxq,
                          ldxq, y + i * ldy, ldy, std::make_integer_sequence<int, F::kMaxRows>());
    }
  }
}

// KernelSet::matmul_q6_k_panels_unpacked (QMatMulUnpackFn): MatMulQuantPanels<F> with each
// slab of panels (at most kPanelSlabBytes and scratch_bytes once unpacked) first unpacked
// into `scratch` by F::UnpackBlock, and the passes over the activation rows reading the
// unpacked slab with F::Unpacked (the same products: bit for bit the same results). For
// fewer than F::kUnpackMinRows rows, or panels too long for the scratch, MatMulQuantPanels<F>.
template <typename F>
KVSERVE_SIMD_TARGET void MatMulQuantPanelsUnpacked(const uint8_t* w, int64_t row_bytes,
                                                   int64_t cols, int64_t row_begin, int64_t row_end,
                                                   const void* xq, int64_t ldxq, int n, float* y,
                                                   int64_t ldy, uint8_t* scratch,
                                                   int64_t scratch_bytes) {
  using U = typename F::Unpacked;
  const int64_t blocks = cols / F::kElems;
  const int64_t unpacked_stride = blocks * U::kBlockBytes;  // one unpacked panel
  const int64_t slab = std::min(kPanelSlabBytes, scratch_bytes) / unpacked_stride;
  if (n < F::kUnpackMinRows || slab == 0) {
    MatMulQuantPanels<F>(w, row_bytes, cols, row_begin, row_end, xq, ldxq, n, y, ldy);
    return;
  }
  const int64_t pstride = model::kPanelRows * row_bytes;
  const uint8_t* x = static_cast<const uint8_t*>(xq);
  const int64_t end = row_end / model::kPanelRows;
  for (int64_t s0 = row_begin / model::kPanelRows; s0 < end; s0 += slab) {
    const int64_t s1 = std::min(end, s0 + slab);
    for (int64_t p = s0; p < s1; ++p) {
      for (int64_t b = 0; b < blocks; ++b) {
        F::UnpackBlock(w + p * pstride + b * F::kBlockBytes,
                       scratch + (p - s0) * unpacked_stride + b * U::kBlockBytes);
      }
    }
    for (int i = 0; i < n; i += U::kMaxRows) {
      QuantPanelRowsOf<U>(std::min(U::kMaxRows, n - i), scratch, unpacked_stride, blocks, 0,
                          s1 - s0, x + i * ldxq, ldxq, y + i * ldy + model::kPanelRows * s0, ldy,
                          std::make_integer_sequence<int, U::kMaxRows>());
    }
  }
}
