// AVX-512 BF16 level: the AVX-512 VNNI kernel set plus KernelSet::matmul_bf16_dot, bf16
// weights against activations rounded to bf16, multiplied with vdpbf16ps (two bf16
// products into each f32 lane per instruction: twice the multiply-adds of an f32 FMA, and
// the weights need no widening). Called only when IsaSupported(Isa::kAvx512Bf16).
// GCC 12's AVX-512 headers trip -Wuninitialized under target attributes (see
// simd_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "backends/cpu_blas/simd_hsum.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "model/panels.h"

#define KVSERVE_SIMD_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace kvserve::backends::cpu_blas {
namespace {

// Elements per step: one 512-bit vector of bf16 pairs.
constexpr int64_t kStep = 32;
static_assert(Bf16DotStride(1) == kStep, "activation rows are padded to whole steps");
// Weight rows x activation rows per register tile (24 accumulators, 4 activation vectors
// and a weight vector: 29 of the 32 registers; a 4 x 6 tile spilled), and activation rows
// per pass over the weights (their bf16 rows, 64 x cols x 2 bytes, stay in L2). Gemm
// hands this kernel slices of a multiple of 12 rows (gemm.cc), so the 1-row tail runs only
// for matrices whose row count is not a multiple of 6. bench/kernels_bench.cc BM_Gemm
// bf16_dot (2048 x 768, 2 threads, Zen 5, medians of 3, two alternated rounds) 4 x 4 ->
// 6 x 4: 64 rows 407/352 -> 464/432 GFLOP/s, 512 rows 456/392 -> 515/511, 16 rows
// 316/287 -> 328/303.
constexpr int kTileRows = 6;
constexpr int kTileCols = 4;
constexpr int kRowsPerPass = 64;

// KernelSet::round_bf16.
KVSERVE_SIMD_TARGET void RoundRow(const float* x, int64_t cols, uint16_t* out) {
  const int64_t padded = Bf16DotStride(cols);
  int64_t c = 0;
  for (; c + kStep <= cols; c += kStep) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + c + 16), _mm512_loadu_ps(x + c));
    _mm512_storeu_si512(out + c, reinterpret_cast<const __m512i&>(v));
  }
  if (c < padded) {
    const int64_t left = cols - c;  // 0 <= left < 32
    const __mmask16 lo = static_cast<__mmask16>((1u << std::min<int64_t>(left, 16)) - 1);
    const __mmask16 hi = static_cast<__mmask16>((1u << std::max<int64_t>(left - 16, 0)) - 1);
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + c + 16),
                                           _mm512_maskz_loadu_ps(lo, x + c));
    _mm512_storeu_si512(out + c, reinterpret_cast<const __m512i&>(v));
  }
}

// y[c * ldy + r] = W_r . xb_c for R weight rows at w (cols apart) and C bf16 activation
// rows at xb (`ldxb` apart; zero from cols to Bf16DotStride(cols)). While it reads the R
// rows it prefetches the R rows two tiles further at the same pace (as
// simd_kernels_inl.h's kContiguous: batch-1 decode streams the weights from memory,
// faster than the hardware prefetcher alone; a hint never faults, so addresses past the
// weights are harmless).
template <int R, int C>
KVSERVE_SIMD_TARGET void DotTile(const uint16_t* w, int64_t cols, const uint16_t* xb, int64_t ldxb,
                                 float* y, int64_t ldy) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  // (Integer arithmetic: the address may lie past the end of the weights.)
  const uintptr_t ahead =
      reinterpret_cast<uintptr_t>(w) + static_cast<uintptr_t>(2 * R * cols) * sizeof(uint16_t);
  auto step = [&](int64_t k, __mmask32 mask) KVSERVE_SIMD_TARGET {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + static_cast<uintptr_t>(k * R + r * kStep) *
                                                             sizeof(uint16_t)),
                   _MM_HINT_T0);
    }
    __m512bh xv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) xv[c] = (__m512bh)_mm512_loadu_si512(xb + c * ldxb + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + r * cols + k);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv, xv[c]);
    }
  };
  int64_t k = 0;
  for (; k + kStep <= cols; k += kStep) step(k, ~__mmask32{0});
  if (k < cols) step(k, static_cast<__mmask32>((uint64_t{1} << (cols - k)) - 1));
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
    // Row c's R outputs are contiguous in y: four sums at a time (HSum4) where R allows.
    int r = 0;
#pragma GCC unroll 2
    for (; r + 4 <= R; r += 4) {
      _mm_storeu_ps(y + c * ldy + r, HSum4(acc[r][c], acc[r + 1][c], acc[r + 2][c], acc[r + 3][c]));
    }
#pragma GCC unroll 4
    for (; r < R; ++r) y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
  }
}

// R weight rows against `n` bf16 activation rows, in tiles of kTileCols rows.
template <int R>
KVSERVE_SIMD_TARGET void DotRows(const uint16_t* w, int64_t cols, const uint16_t* xb, int64_t ldxb,
                                 int n, float* y, int64_t ldy) {
  int i = 0;
  for (; i + kTileCols <= n; i += kTileCols) {
    DotTile<R, kTileCols>(w, cols, xb + i * ldxb, ldxb, y + i * ldy, ldy);
  }
  for (; i < n; ++i) DotTile<R, 1>(w, cols, xb + i * ldxb, ldxb, y + i * ldy, ldy);
}

// KernelSet::matmul_bf16_dot.
KVSERVE_SIMD_TARGET void MatMulBf16Dot(const uint16_t* w, int64_t cols, int64_t row_begin,
                                       int64_t row_end, const uint16_t* xb, int64_t ldxb, int n,
                                       float* y, int64_t ldy) {
  for (int i0 = 0; i0 < n; i0 += kRowsPerPass) {
    const int nn = std::min(kRowsPerPass, n - i0);
    const uint16_t* xp = xb + i0 * ldxb;
    float* yp = y + i0 * ldy;
    int64_t r = row_begin;
    for (; r + kTileRows <= row_end; r += kTileRows) {
      DotRows<kTileRows>(w + r * cols, cols, xp, ldxb, nn, yp + r, ldy);
    }
    for (; r < row_end; ++r) DotRows<1>(w + r * cols, cols, xp, ldxb, nn, yp + r, ldy);
  }
}

// The panel layout (model/panels.h): weight rows in panels of kPanelRows, each
// panel as column pairs, one 64-byte line per pair holding the pair of every row of the
// panel. One vdpbf16ps multiplies a line by a broadcast pair of one activation row, so
// every weight is loaded once per pass for all M activation rows, the panels stream in
// address order, and the results need no horizontal sums. Against the row layout above
// (DotTile: four passes of 4 activation rows over each 6-row group), a standalone copy of
// both kernels (2048 x 2048, 512 MiB of matrices, 2 threads, Zen 5, GFLOP/s rows ->
// panels): 1 row 42 -> 51-63 GB/s, 16 rows 300 -> 425-475, 64 rows 430 -> 560, 512 rows
// 400 -> 500-580 (bench/kernels_bench.cc BM_Gemm bf16_dot:1 vs 2, 2048 x 768: 16 rows 329
// -> 387, 64 rows 464 -> 431).
using model::kPanelRows;
static_assert(kPanelRows == 16, "one panel line is one 512-bit vector of bf16 pairs");
// Panel lines read ahead of the one in use, per panel stream: 4 KiB, about as far as the
// memory latency at the 16-row rate (one line per 16 vdpbf16ps); 16 lines ahead ran the
// 16-row product at 380 GFLOP/s, 64 at 475, 128 and 256 lines no faster.
constexpr int64_t kPanelPrefetchLines = 64;
// Panels per block: every activation row goes over one block before the next, so a block
// (about this many bytes) stays in L2 for all rows of a prefill.
constexpr int64_t kPanelBlockBytes = 256 << 10;

// y[m * ldy + 16 p + j] = sum_c W[16 p + j, c] * XB[m, c] for p in [0, P), m in [0, M),
// j in [0, 16): P panels from w (panel_elems apart) against M activation rows.
template <int P, int M>
KVSERVE_SIMD_TARGET void PanelTile(const uint16_t* w, int64_t panel_elems, int64_t pairs,
                                   const uint16_t* xb, int64_t ldxb, float* y, int64_t ldy) {
  __m512 acc[P][M];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) acc[p][m] = _mm512_setzero_ps();
  }
  // (Integer arithmetic: the prefetched address may lie past the end of the weights; a
  // hint never faults.)
  const uintptr_t base = reinterpret_cast<uintptr_t>(w);
  for (int64_t k = 0; k < pairs; ++k) {
    __m512bh wv[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const int64_t at = p * panel_elems + k * 2 * kPanelRows;
      _mm_prefetch(reinterpret_cast<const char*>(
                       base + static_cast<uintptr_t>(at + kPanelPrefetchLines * 2 * kPanelRows) *
                                  sizeof(uint16_t)),
                   _MM_HINT_T0);
      wv[p] = (__m512bh)_mm512_loadu_si512(w + at);
    }
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      uint32_t pair;
      std::memcpy(&pair, xb + m * ldxb + 2 * k, sizeof(pair));
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) acc[p][m] = _mm512_dpbf16_ps(acc[p][m], wv[p], xv);
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) _mm512_storeu_ps(y + m * ldy + p * kPanelRows, acc[p][m]);
  }
}

// Panels [p0, p1) against M activation rows, P panels per tile: fewer rows take more
// panels at once, so that enough accumulators are in flight (P * M of them, at most 16)
// and a batch-1 product streams four panels side by side.
template <int M>
KVSERVE_SIMD_TARGET void PanelRows(const uint16_t* w, int64_t panel_elems, int64_t pairs,
                                   int64_t p0, int64_t p1, const uint16_t* xb, int64_t ldxb,
                                   float* y, int64_t ldy) {
  constexpr int P = M <= 2 ? 4 : M <= 5 ? 3 : M <= 8 ? 2 : 1;
  int64_t p = p0;
  for (; p + P <= p1; p += P) {
    PanelTile<P, M>(w + p * panel_elems, panel_elems, pairs, xb, ldxb, y + p * kPanelRows, ldy);
  }
  for (; p < p1; ++p) {
    PanelTile<1, M>(w + p * panel_elems, panel_elems, pairs, xb, ldxb, y + p * kPanelRows, ldy);
  }
}

// PanelRows<m> for a run-time m in [1, 16].
template <int... Ms>
KVSERVE_SIMD_TARGET void PanelRowsOf(int m, const uint16_t* w, int64_t panel_elems, int64_t pairs,
                                     int64_t p0, int64_t p1, const uint16_t* xb, int64_t ldxb,
                                     float* y, int64_t ldy, std::integer_sequence<int, Ms...>) {
  ((m == Ms + 1 ? PanelRows<Ms + 1>(w, panel_elems, pairs, p0, p1, xb, ldxb, y, ldy) : void()),
   ...);
}

// KernelSet::matmul_bf16_panels.
KVSERVE_SIMD_TARGET void MatMulBf16Panels(const uint16_t* w, int64_t cols, int64_t row_begin,
                                          int64_t row_end, const uint16_t* xb, int64_t ldxb, int n,
                                          float* y, int64_t ldy) {
  const int64_t panel_elems = kPanelRows * cols;
  const int64_t pairs = cols / 2;
  const int64_t block = std::max<int64_t>(
      1, kPanelBlockBytes / (panel_elems * static_cast<int64_t>(sizeof(uint16_t))));
  const int64_t p_end = row_end / kPanelRows;
  for (int64_t b0 = row_begin / kPanelRows; b0 < p_end; b0 += block) {
    const int64_t b1 = std::min(p_end, b0 + block);
    for (int i = 0; i < n; i += kPanelRows) {
      PanelRowsOf(std::min<int>(kPanelRows, n - i), w, panel_elems, pairs, b0, b1, xb + i * ldxb,
                  ldxb, y + i * ldy, ldy, std::make_integer_sequence<int, 16>());
    }
  }
}

KernelSet MakeBf16Set() {
  KernelSet k = Avx512VnniKernels();
  k.isa = Isa::kAvx512Bf16;
  k.matmul_bf16_dot = &MatMulBf16Dot;
  k.round_bf16 = &RoundRow;
  k.matmul_bf16_panels = &MatMulBf16Panels;
  return k;
}

}  // namespace

const KernelSet& Avx512Bf16Kernels() {
  static const KernelSet k = MakeBf16Set();
  return k;
}

}  // namespace kvserve::backends::cpu_blas
