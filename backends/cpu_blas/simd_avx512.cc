// AVX-512 F kernels (16 float lanes). Compiled with per-function target attributes so
// the rest of the program stays baseline x86-64; called only when
// IsaSupported(Isa::kAvx512). The loops are in simd_kernels_inl.h (shared with, and
// tested through, the AVX2 level); this file holds the AVX-512 vector and weight traits,
// the f32 and exact bf16 panel kernels (simd_float_panels_inl.h) and the 256-bit q4_0 / q8_0 panel
// kernels (simd_quant_panels_avx2_inl.h; the VNNI level replaces them with 512-bit ones). GCC 12's
// avx512fintrin.h initialises "undefined" vectors from themselves, which -Wuninitialized reports
// when the intrinsics are used under a target attribute (GCC bug 105593, fixed in GCC 13). The
// warning is about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
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

#define KVSERVE_SIMD_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))

namespace kvserve::backends::cpu_blas {
namespace {

struct V {
  using Reg = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kBlockRows = 4;  // weight rows per batched block (simd_kernels_inl.h)
  KVSERVE_SIMD_TARGET static Reg Zero() { return _mm512_setzero_ps(); }
  KVSERVE_SIMD_TARGET static Reg Broadcast(float v) { return _mm512_set1_ps(v); }
  KVSERVE_SIMD_TARGET static Reg Load(const float* p) { return _mm512_loadu_ps(p); }
  KVSERVE_SIMD_TARGET static void Store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  KVSERVE_SIMD_TARGET static Reg Fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  KVSERVE_SIMD_TARGET static float HSum(Reg v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 s8 = _mm256_add_ps(lo, hi);
    return HSum128(_mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1)));
  }
  KVSERVE_SIMD_TARGET static __m128 HSum4(Reg a, Reg b, Reg c, Reg d) {
    return cpu_blas::HSum4(a, b, c, d);
  }
  KVSERVE_SIMD_TARGET static void Store4(float* p, __m128 v) { _mm_storeu_ps(p, v); }
  KVSERVE_SIMD_TARGET static __m128 Scale4(__m128 v, float s) {
    return _mm_mul_ps(v, _mm_set1_ps(s));
  }
  KVSERVE_SIMD_TARGET static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Min(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  KVSERVE_SIMD_TARGET static Reg Round(Reg v) {
    return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // The exponent field n + 127, shifted into place.
  KVSERVE_SIMD_TARGET static Reg Pow2(Reg n) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  KVSERVE_SIMD_TARGET static Reg ZeroBelow(Reg v, Reg x, Reg lo) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), v);
  }
  KVSERVE_SIMD_TARGET static float HMax(Reg v) { return _mm512_reduce_max_ps(v); }
  // q[l] = int8(v[l]) for integer-valued v in [-127, 127].
  KVSERVE_SIMD_TARGET static void StoreCodes(int8_t* q, Reg v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  KVSERVE_SIMD_TARGET static void Pin(Reg& v) { __asm__("" : "+v"(v)); }
};

// Weight element types: Load converts 16 consecutive elements to floats, One a single one.
struct F32W {
  using T = float;
  KVSERVE_SIMD_TARGET static __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
  static float One(float v) { return v; }
};
struct F16W {
  using T = uint16_t;
  KVSERVE_SIMD_TARGET static __m512 Load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // p[0, 16) = v rounded to f16, nearest even (vcvtps2ph's immediate, not MXCSR).
  KVSERVE_SIMD_TARGET static void Store(uint16_t* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // The same exact conversion as Load, one element (model::HalfToFloat is a call per element:
  // the scalar tails of head_dim < kLanes, e.g. 8, ran 4-5x slower than f32).
  KVSERVE_SIMD_TARGET static float One(uint16_t v) { return _cvtsh_ss(v); }
};
struct BF16W {
  using T = uint16_t;
  // bf16 is the upper half of an f32: widen to 32 bits and shift left by 16 (exact).
  KVSERVE_SIMD_TARGET static __m512 Load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static float One(uint16_t v) { return model::BF16ToFloat(v); }
};

#include "backends/cpu_blas/simd_float_panels_zmm_inl.h"  // NOLINT(build/include): see its header

// The f32 panel layout (model/panels.h): one line is a column of 16 rows, one
// vfmadd231ps multiplies it by a broadcast element of one activation row.
struct F32Lines : Zmm16FloatLanes {
  using Weight = float;
  using Act = float;
  static constexpr int64_t kCols = 1;
  using Vec = __m512;
  KVSERVE_SIMD_TARGET static Vec Line(const float* at) { return _mm512_loadu_ps(at); }
  KVSERVE_SIMD_TARGET static Vec Broadcast(const float* at) { return _mm512_set1_ps(*at); }
  KVSERVE_SIMD_TARGET static __m512 Madd(__m512 acc, Vec w, Vec x) {
    return _mm512_fmadd_ps(w, x, acc);
  }
};

// The bf16 panel layout for KernelSet::matmul_bf16_panels_exact: the columns in order (even,
// then odd), one FMA each, as F32Lines on the widened weights.
struct Bf16ExactLines : Bf16ZmmWidened {
  KVSERVE_SIMD_TARGET static __m512 Madd(__m512 acc, Vec w, Vec x) {
    return _mm512_fmadd_ps(w.odd, x.odd, _mm512_fmadd_ps(w.even, x.even, acc));
  }
};

#include "backends/cpu_blas/simd_float_panels_inl.h"       // NOLINT(build/include): see its header
#include "backends/cpu_blas/simd_kernels_inl.h"            // NOLINT(build/include): see its header
#include "backends/cpu_blas/simd_quant_inl.h"              // NOLINT(build/include): see its header
#include "backends/cpu_blas/simd_quant_panels_avx2_inl.h"  // NOLINT(build/include): see its header

constexpr KernelSet WithFloatPanels(KernelSet k) {
  k.matmul_f32_panels = &MatMulFloatPanels<F32Lines>;
  k.matmul_bf16_panels_exact = &MatMulFloatPanels<Bf16ExactLines>;
  return k;
}

constexpr KernelSet kAvx512Set = WithFloatPanels(WithYmmQuantPanelKernels<MaddubsDot>(
    WithQuantKernels<MaddubsDot>(MakeKernelSet(Isa::kAvx512))));

}  // namespace

const KernelSet& Avx512Kernels() { return kAvx512Set; }

}  // namespace kvserve::backends::cpu_blas
