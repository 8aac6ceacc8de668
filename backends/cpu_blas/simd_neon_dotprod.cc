// NEON + dot-product level: the NEON kernel set, with products of quantized weights that
// use sdot (4 byte products summed into each int32 lane, one instruction where the NEON
// level takes smull + smlal2 + sadalp per 16 bytes; simd_quant_neon_inl.h). Compiled with
// a per-function target attribute; called only when IsaSupported(Isa::kNeonDotprod).
#include <arm_neon.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu_blas/q8_activations.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "model/dtype.h"
#include "model/quant.h"

#define KVSERVE_SIMD_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))

namespace kvserve::backends::cpu_blas {
namespace {

#include "backends/cpu_blas/simd_quant_neon_inl.h"  // NOLINT(build/include): see its header

struct SdotDot {
  KVSERVE_SIMD_TARGET static int32x4_t Dot(int32x4_t acc, int8x16_t a, int8x16_t b) {
    return vdotq_s32(acc, a, b);
  }
};

KernelSet MakeDotprodSet() {
  KernelSet k = WithNeonQuantKernels<SdotDot>(NeonKernels());
  k.isa = Isa::kNeonDotprod;
  return k;
}

}  // namespace

const KernelSet& NeonDotprodKernels() {
  static const KernelSet k = MakeDotprodSet();
  return k;
}

}  // namespace kvserve::backends::cpu_blas
