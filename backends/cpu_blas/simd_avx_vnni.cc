// AVX-VNNI level: the AVX2 kernel set, with products of quantized weights that use the
// VEX-encoded 256-bit vpdpbusd (u8 x s8 dot products of 4 into int32 in one instruction,
// where the AVX2 level spends vpmaddubsw + vpmaddwd + vpaddd): the row kernels of
// simd_quant_inl.h and the 16-row panel kernels of simd_quant_panels_avx2_inl.h, with
// AvxVnniDot for their integer step. The float kernels are the AVX2 level's. For AVX2 CPUs
// with AVX-VNNI and without AVX-512 (Intel Alder Lake and later client cores, Sierra Forest);
// CPUs with AVX-512 VNNI as well take that level (BestIsa). Compiled with per-function
// target attributes; called only when IsaSupported(Isa::kAvxVnni).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "backends/cpu_blas/q8_activations.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "model/dtype.h"
#include "model/panels.h"
#include "model/quant.h"

#define KVSERVE_SIMD_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))

namespace kvserve::backends::cpu_blas {
namespace {

// vpdpbusd ymm (the AVX-VNNI form; the AVX-512 VNNI level's VnniDot is its EVEX twin).
struct AvxVnniDot {
  static constexpr bool kUnsignedOffset = true;  // int32 sums: (w + 128) x cannot overflow
  KVSERVE_SIMD_TARGET static __m256i DotU8S8(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
  }
  // acc[k] += a[2k] * b[2k] + a[2k + 1] * b[2k + 1] (int16 pairs; the panels' offset terms).
  KVSERVE_SIMD_TARGET static __m256i DotS16(__m256i acc, __m256i a, __m256i b) {
    return _mm256_dpwssd_avx_epi32(acc, a, b);
  }
};

#include "backends/cpu_blas/simd_quant_inl.h"              // NOLINT(build/include): see its header
#include "backends/cpu_blas/simd_quant_panels_avx2_inl.h"  // NOLINT(build/include): see its header

KernelSet MakeAvxVnniSet() {
  KernelSet k = WithYmmQuantPanelKernels<AvxVnniDot>(WithQuantKernels<AvxVnniDot>(Avx2Kernels()));
  k.isa = Isa::kAvxVnni;
  return k;
}

}  // namespace

const KernelSet& AvxVnniKernels() {
  static const KernelSet k = MakeAvxVnniSet();
  return k;
}

}  // namespace kvserve::backends::cpu_blas
