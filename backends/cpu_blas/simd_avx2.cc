// AVX2 + FMA + F16C kernels (8 float lanes). Compiled with per-function target
// attributes so the rest of the program stays baseline x86-64; called only when
// IsaSupported(Isa::kAvx2). The loops are in simd_kernels_inl.h; this file holds the
// AVX2 vector and weight traits. f32 and bf16 weights in 16-row panels: simd_float_panels_inl.h
// with F32LinesYmm and Bf16ExactLinesYmm below (their accumulator: Ymm16Rows of
// simd_quant_panels_avx2_inl.h); quantized weights in 16-row panels: simd_quant_panels_avx2_inl.h.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "backends/cpu_blas/q8_activations.h"
#include "backends/cpu_blas/simd_hsum.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "model/dtype.h"
#include "model/panels.h"
#include "model/quant.h"

#define KVSERVE_SIMD_TARGET __attribute__((target("avx2,fma,f16c")))

namespace kvserve::backends::cpu_blas {
namespace {

struct V {
  using Reg = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kBlockRows = 2;  // weight rows per batched block (simd_kernels_inl.h)
  KVSERVE_SIMD_TARGET static Reg Zero() { return _mm256_setzero_ps(); }
  KVSERVE_SIMD_TARGET static Reg Broadcast(float v) { return _mm256_set1_ps(v); }
  KVSERVE_SIMD_TARGET static Reg Load(const float* p) { return _mm256_loadu_ps(p); }
  KVSERVE_SIMD_TARGET static void Store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  KVSERVE_SIMD_TARGET static Reg Fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  KVSERVE_SIMD_TARGET static float HSum(Reg v) {
    return HSum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
  }
  KVSERVE_SIMD_TARGET static __m128 HSum4(Reg a, Reg b, Reg c, Reg d) {
    return cpu_blas::HSum4(a, b, c, d);
  }
  KVSERVE_SIMD_TARGET static void Store4(float* p, __m128 v) { _mm_storeu_ps(p, v); }
  KVSERVE_SIMD_TARGET static __m128 Scale4(__m128 v, float s) {
    return _mm_mul_ps(v, _mm_set1_ps(s));
  }
  KVSERVE_SIMD_TARGET static Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Min(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Round(Reg v) {
    return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // The exponent field n + 127, shifted into place.
  KVSERVE_SIMD_TARGET static Reg Pow2(Reg n) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  KVSERVE_SIMD_TARGET static Reg ZeroBelow(Reg v, Reg x, Reg lo) {
    return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), v);
  }
  KVSERVE_SIMD_TARGET static float HMax(Reg v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  // q[l] = int8(v[l]) for integer-valued v in [-127, 127].
  KVSERVE_SIMD_TARGET static void StoreCodes(int8_t* q, Reg v) {
    const __m256i i = _mm256_cvtps_epi32(v);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q), _mm_packs_epi16(w, w));
  }
  KVSERVE_SIMD_TARGET static void Pin(Reg& v) { __asm__("" : "+x"(v)); }
};

// Weight element types: Load converts 8 consecutive elements to floats, One a single one.
struct F32W {
  using T = float;
  KVSERVE_SIMD_TARGET static __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
  static float One(float v) { return v; }
};
struct F16W {
  using T = uint16_t;
  KVSERVE_SIMD_TARGET static __m256 Load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // p[0, 8) = v rounded to f16, nearest even (vcvtps2ph's immediate, not MXCSR).
  KVSERVE_SIMD_TARGET static void Store(uint16_t* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  // The same exact conversion as Load, one element (model::HalfToFloat is a call per element:
  // the scalar tails of head_dim < kLanes, e.g. 8, ran 4-5x slower than f32).
  KVSERVE_SIMD_TARGET static float One(uint16_t v) { return _cvtsh_ss(v); }
};
struct BF16W {
  using T = uint16_t;
  // bf16 is the upper half of an f32: widen to 32 bits and shift left by 16 (exact).
  KVSERVE_SIMD_TARGET static __m256 Load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float One(uint16_t v) { return model::BF16ToFloat(v); }
};

#include "backends/cpu_blas/simd_float_panels_inl.h"       // NOLINT(build/include): see its header
#include "backends/cpu_blas/simd_kernels_inl.h"            // NOLINT(build/include): see its header
#include "backends/cpu_blas/simd_quant_inl.h"              // NOLINT(build/include): see its header
#include "backends/cpu_blas/simd_quant_panels_avx2_inl.h"  // NOLINT(build/include): see its header

// The f32 panel layout (model/panels.h) in 256-bit halves: one line is a column of 16 rows,
// two vfmadd231ps (rows 0-7, 8-15) multiply it by a broadcast element of one activation
// row. 16 registers: 2 accumulators per (panel, activation row), at most 12 of them, so
// that the line's halves and the broadcast fit beside them.
struct F32LinesYmm : Ymm16Rows {
  using Weight = float;
  using Act = float;
  static constexpr int64_t kCols = 1;
  using Vec = Acc;  // a line: rows 0-7, 8-15
  KVSERVE_SIMD_TARGET static Vec Line(const float* at) {
    return Vec{{_mm256_loadu_ps(at), _mm256_loadu_ps(at + 8)}};
  }
  KVSERVE_SIMD_TARGET static __m256 Broadcast(const float* at) { return _mm256_set1_ps(*at); }
  KVSERVE_SIMD_TARGET static Acc Madd(Acc acc, Vec w, __m256 x) {
    return Acc{
        {_mm256_fmadd_ps(w.half[0], x, acc.half[0]), _mm256_fmadd_ps(w.half[1], x, acc.half[1])}};
  }
  // Activation rows per pass over a block: 6 rows of one panel (12 accumulators). (8 rows,
  // which spill, measured 0.79-0.87x from 32 to 512 rows: bench/kernels_bench.cc BM_Gemm,
  // alternating builds, Emerald Rapids at the avx2 level.)
  static constexpr int kPassRows = 6;
  // Panels per tile for m rows: batch 1 streams 4 panels side by side (8 accumulators; the
  // lines go straight from memory into the multiply-adds), 2 and 3 rows take 3 and 2.
  // (Chosen by register count and measured as a whole, docs/performance.md "AVX2 kernels
  // on Emerald Rapids"; other tilings not yet compared.)
  static constexpr int Panels(int m) { return m == 1 ? 4 : m == 2 ? 3 : m == 3 ? 2 : 1; }
};

// The bf16 panel layout for KernelSet::matmul_bf16_panels_exact in 256-bit halves: each
// half of a line (the column pair of 8 rows) widened to its even and odd columns (a bf16
// is the upper half of an f32: exact), then per half the columns in order, one FMA each, as
// F32LinesYmm on the widened weights. A widened line takes 4 registers (F32LinesYmm's
// line 2).
struct Bf16ExactLinesYmm : Ymm16Rows {
  using Weight = uint16_t;
  using Act = float;
  static constexpr int64_t kCols = 2;
  struct Vec {
    __m256 even[2];  // rows 0-7, 8-15
    __m256 odd[2];
  };
  struct Pair {
    __m256 even;
    __m256 odd;
  };
  KVSERVE_SIMD_TARGET static Vec Line(const uint16_t* at) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 16));
    const __m256i odd_mask = _mm256_set1_epi32(~0xFFFF);
    return Vec{{_mm256_castsi256_ps(_mm256_slli_epi32(lo, 16)),
                _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16))},
               {_mm256_castsi256_ps(_mm256_and_si256(lo, odd_mask)),
                _mm256_castsi256_ps(_mm256_and_si256(hi, odd_mask))}};
  }
  KVSERVE_SIMD_TARGET static Pair Broadcast(const float* at) {
    return Pair{_mm256_set1_ps(at[0]), _mm256_set1_ps(at[1])};
  }
  KVSERVE_SIMD_TARGET static Acc Madd(Acc acc, const Vec& w, Pair x) {
    return Acc{{_mm256_fmadd_ps(w.odd[0], x.odd, _mm256_fmadd_ps(w.even[0], x.even, acc.half[0])),
                _mm256_fmadd_ps(w.odd[1], x.odd, _mm256_fmadd_ps(w.even[1], x.even, acc.half[1]))}};
  }
  // Activation rows per pass: 8 rows of one panel. Their 16 accumulators, the widened
  // line's 4 registers and a broadcast pair are more than the 16 registers: the compiler
  // keeps 6 accumulators on the stack (a load-FMA-store per word, off the FMA chains'
  // critical path). Measured against 6 rows (which fit), alternating builds on Emerald
  // Rapids at the avx2 level (bench/kernels_bench.cc BM_Gemm bf16 panels, 2 threads, 3
  // rounds): 8 rows 1.01-1.17x faster from 16 to 512 rows (f32 the other way:
  // F32LinesYmm). Not measured on an AVX2-only core.
  static constexpr int kPassRows = 8;
  // Batch 1 streams 4 panels side by side (8 accumulators; each line widened just before
  // its FMAs), 2 rows take 2.
  static constexpr int Panels(int m) { return m == 1 ? 4 : m == 2 ? 2 : 1; }
};

constexpr KernelSet WithFloatPanels(KernelSet k) {
  k.matmul_f32_panels = &MatMulFloatPanels<F32LinesYmm>;
  k.matmul_bf16_panels_exact = &MatMulFloatPanels<Bf16ExactLinesYmm>;
  return k;
}

constexpr KernelSet kAvx2Set = WithFloatPanels(
    WithYmmQuantPanelKernels<MaddubsDot>(WithQuantKernels<MaddubsDot>(MakeKernelSet(Isa::kAvx2))));

}  // namespace

const KernelSet& Avx2Kernels() { return kAvx2Set; }

}  // namespace kvserve::backends::cpu_blas
