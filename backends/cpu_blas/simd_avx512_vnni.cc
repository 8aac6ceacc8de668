// AVX-512 VNNI level: the AVX-512 F kernel set, with products of quantized weights that
// use vpdpbusd (u8 x s8 dot products of 4 into int32 in one instruction): 256-bit for
// batch 1 (simd_quant_inl.h), 512-bit register tiles for interleaved activation rows
// (simd_quant_tiles_inl.h), 512-bit batch-1 products for q4_0, q5_0 and the k-quants
// (simd_quant_vec512_inl.h), and q4_0 weights in 16-row panels (simd_quant_panels_inl.h). Compiled
// with per-function target attributes; called only when IsaSupported(Isa::kAvx512Vnni). GCC 12's
// AVX-512 headers trip -Wuninitialized under target attributes (see simd_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cpu_blas/q8_activations.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "model/dtype.h"
#include "model/panels.h"
#include "model/quant.h"

#define KVSERVE_SIMD_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace kvserve::backends::cpu_blas {
namespace {

// 256-bit vpdpbusd (AVX512-VL form): see simd_quant_inl.h for why 256 bits.
struct VnniDot {
  static constexpr bool kUnsignedOffset = true;  // int32 sums: (w + 128) x cannot overflow
  KVSERVE_SIMD_TARGET static __m256i DotU8S8(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(acc, u, s);
  }
};

#include "backends/cpu_blas/simd_quant_inl.h"         // NOLINT(build/include): see its header
#include "backends/cpu_blas/simd_quant_panels_inl.h"  // NOLINT(build/include): see its header
#include "backends/cpu_blas/simd_quant_tiles_inl.h"   // NOLINT(build/include): see its header
#include "backends/cpu_blas/simd_quant_vec512_inl.h"  // NOLINT(build/include): see its header

KernelSet MakeVnniSet() {
  KernelSet k = WithQuantPanelKernels(WithVec512QuantKernels<VnniDot>(
      WithTiledQuantKernels<VnniDot>(WithQuantKernels<VnniDot>(Avx512Kernels()))));
  k.isa = Isa::kAvx512Vnni;
  return k;
}

}  // namespace

const KernelSet& Avx512VnniKernels() {
  static const KernelSet k = MakeVnniSet();
  return k;
}

}  // namespace kvserve::backends::cpu_blas
