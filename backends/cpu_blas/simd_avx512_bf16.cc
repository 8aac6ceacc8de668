// AVX-512 BF16 level: the AVX-512 VNNI kernel set plus KernelSet::matmul_bf16_dot, bf16
// weights against activations rounded to bf16, multiplied with vdpbf16ps (two bf16
// products into each f32 lane per instruction: twice the multiply-adds of an f32 FMA, and
// the weights need no widening), and matmul_bf16_panels_fma, the same arithmetic in f32
// FMAs for CPUs where vdpbf16ps is slow (bf16_products.h). Called only when
// IsaSupported(Isa::kAvx512Bf16).
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
// for matrices whose row count is not a multiple of 6. The largest tile that fits the
// register file loads each weight and activation vector for the most multiply-adds;
// 6 x 4 measured faster than 4 x 4 at every row count (bench/kernels_bench.cc BM_Gemm
// bf16_dot).
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

#include "backends/cpu_blas/simd_float_panels_zmm_inl.h"  // NOLINT(build/include): see its header

// The bf16 panel layout (model/panels.h): one line is the column pair of 16 rows, one
// vdpbf16ps multiplies it by a broadcast pair of one activation row.
struct Bf16Lines : Zmm16FloatLanes {
  using Weight = uint16_t;
  using Act = uint16_t;
  static constexpr int64_t kCols = 2;
  using Vec = __m512bh;
  KVSERVE_SIMD_TARGET static Vec Line(const uint16_t* at) {
    return (__m512bh)_mm512_loadu_si512(at);
  }
  KVSERVE_SIMD_TARGET static Vec Broadcast(const uint16_t* at) {
    uint32_t pair;
    std::memcpy(&pair, at, sizeof(pair));
    return (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
  }
  KVSERVE_SIMD_TARGET static __m512 Madd(__m512 acc, Vec w, Vec x) {
    return _mm512_dpbf16_ps(acc, w, x);
  }
};

// The same panel layout read for f32 multiply-adds (Bf16ZmmWidened: each line widened to
// its odd and even columns, the activations given as floats that hold bf16 values, the same
// rounding as for vdpbf16ps), and per word
//   acc = fma(w_odd, x_odd, acc); acc = fma(w_even, x_even, acc)
// which is vdpbf16ps's definition in Intel's manual (two f32 FMAs, odd pair first, round
// to nearest even, denormal inputs read as zero and denormal results flushed: the caller
// sets MXCSR so, MatMulBf16PanelsFma). Where vdpbf16ps issues at a quarter of the FMA's
// rate (Intel Sapphire and Emerald Rapids: 0.5 against 2 a cycle), two FMAs a word are
// twice as fast; bf16_products.h decides which of the two kernels a process runs.
struct Bf16WidenedLines : Bf16ZmmWidened {
  KVSERVE_SIMD_TARGET static __m512 Madd(__m512 acc, Vec w, Vec x) {
    return _mm512_fmadd_ps(w.even, x.even, _mm512_fmadd_ps(w.odd, x.odd, acc));
  }
};

#include "backends/cpu_blas/simd_float_panels_inl.h"  // NOLINT(build/include): see its header

// MXCSR for vdpbf16ps's rounding: all exceptions masked (0x1F80), round to nearest even,
// denormals are zero (0x40) and flush to zero (0x8000).
constexpr unsigned kDpbf16Csr = 0x1F80 | 0x40 | 0x8000;

// KernelSet::matmul_bf16_panels_fma.
KVSERVE_SIMD_TARGET void MatMulBf16PanelsFma(const uint16_t* w, int64_t cols, int64_t row_begin,
                                             int64_t row_end, const float* x, int64_t ldx, int n,
                                             float* y, int64_t ldy) {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(kDpbf16Csr);
  MatMulFloatPanels<Bf16WidenedLines>(w, cols, row_begin, row_end, x, ldx, n, y, ldy);
  _mm_setcsr(saved);
}

KernelSet MakeBf16Set() {
  KernelSet k = Avx512VnniKernels();
  k.isa = Isa::kAvx512Bf16;
  k.matmul_bf16_dot = &MatMulBf16Dot;
  k.round_bf16 = &RoundRow;
  k.matmul_bf16_panels = &MatMulFloatPanels<Bf16Lines>;
  k.matmul_bf16_panels_fma = &MatMulBf16PanelsFma;
  return k;
}

}  // namespace

const KernelSet& Avx512Bf16Kernels() {
  static const KernelSet k = MakeBf16Set();
  return k;
}

}  // namespace kvserve::backends::cpu_blas
