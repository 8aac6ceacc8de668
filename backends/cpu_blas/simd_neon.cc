// AArch64 Advanced SIMD (NEON) kernels, 4 float lanes: the float kernels of
// simd_kernels_inl.h with NEON vector and weight traits, and the quantized products of
// simd_quant_neon_inl.h with byte products by smull / smlal (SmullDot). NEON is part of
// every AArch64 CPU, so this file needs no target attribute; the dotprod and i8mm levels
// (simd_neon_dotprod.cc, simd_neon_i8mm.cc) reuse its float kernels. Built for AArch64
// only (backends/CMakeLists.txt); called only when IsaSupported(Isa::kNeon).
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu_blas/q8_activations.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "model/dtype.h"
#include "model/quant.h"

#define KVSERVE_SIMD_TARGET

namespace kvserve::backends::cpu_blas {
namespace {

struct V {
  using Reg = float32x4_t;
  static constexpr int kLanes = 4;
  static constexpr int kBlockRows = 4;  // 32 vector registers, as AVX-512
  static Reg Zero() { return vdupq_n_f32(0.0f); }
  static Reg Broadcast(float v) { return vdupq_n_f32(v); }
  static Reg Load(const float* p) { return vld1q_f32(p); }
  static void Store(float* p, Reg v) { vst1q_f32(p, v); }
  static Reg Fma(Reg a, Reg b, Reg c) { return vfmaq_f32(c, a, b); }
  // (a0 + a1) + (a2 + a3): the tree of HSum4.
  static float HSum(Reg v) { return vaddvq_f32(v); }
  static Reg HSum4(Reg a, Reg b, Reg c, Reg d) {
    return vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d));
  }
  static void Store4(float* p, Reg v) { vst1q_f32(p, v); }
  static Reg Scale4(Reg v, float s) { return vmulq_n_f32(v, s); }
  static Reg Add(Reg a, Reg b) { return vaddq_f32(a, b); }
  static Reg Sub(Reg a, Reg b) { return vsubq_f32(a, b); }
  static Reg Mul(Reg a, Reg b) { return vmulq_f32(a, b); }
  static Reg Div(Reg a, Reg b) { return vdivq_f32(a, b); }
  // a where a < b (a > b), else b: b when either is NaN, as minps / maxps (fmin / fmax
  // would return NaN).
  static Reg Min(Reg a, Reg b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
  static Reg Max(Reg a, Reg b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
  static Reg Round(Reg v) { return vrndnq_f32(v); }
  // The exponent field n + 127, shifted into place.
  static Reg Pow2(Reg n) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23));
  }
  static Reg ZeroBelow(Reg v, Reg x, Reg lo) {
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(v), vcltq_f32(x, lo)));
  }
  static float HMax(Reg v) { return vmaxvq_f32(v); }
  // q[l] = int8(v[l]) for integer-valued v in [-127, 127].
  static void StoreCodes(int8_t* q, Reg v) {
    const int16x4_t h = vqmovn_s32(vcvtnq_s32_f32(v));
    const int8x8_t b = vqmovn_s16(vcombine_s16(h, h));
    vst1_lane_s32(reinterpret_cast<int32_t*>(q), vreinterpret_s32_s8(b), 0);
  }
  static void Pin(Reg& v) { __asm__("" : "+w"(v)); }
};

// Weight element types: Load converts 4 consecutive elements to floats, One a single one.
struct F32W {
  using T = float;
  static float32x4_t Load(const float* p) { return vld1q_f32(p); }
  static float One(float v) { return v; }
};
struct F16W {
  using T = uint16_t;
  // fcvtl (exact; in the base architecture).
  static float32x4_t Load(const uint16_t* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
  }
  // p[0, 4) = v rounded to f16 by fcvtn in the FPCR's mode: nearest even, as Linux starts
  // every thread (and as nothing in kvserve changes).
  static void Store(uint16_t* p, float32x4_t v) {
    vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v)));
  }
  static float One(uint16_t v) { return model::HalfToFloat(v); }
};
struct BF16W {
  using T = uint16_t;
  // bf16 is the upper half of an f32: widen to 32 bits shifted left by 16 (exact).
  static float32x4_t Load(const uint16_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  }
  static float One(uint16_t v) { return model::BF16ToFloat(v); }
};

#include "backends/cpu_blas/simd_kernels_inl.h"     // NOLINT(build/include): see its header
#include "backends/cpu_blas/simd_quant_neon_inl.h"  // NOLINT(build/include): see its header

constexpr KernelSet kNeonSet = WithNeonQuantKernels<SmullDot>(MakeKernelSet(Isa::kNeon));

}  // namespace

const KernelSet& NeonKernels() { return kNeonSet; }

}  // namespace kvserve::backends::cpu_blas
