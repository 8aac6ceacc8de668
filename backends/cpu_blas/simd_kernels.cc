#include "backends/cpu_blas/simd_kernels.h"

#include <iterator>

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "model/panels.h"

namespace kvserve::backends::cpu_blas {

static_assert(Q6_KPanelParts::kHeaderBytes + Q6_KPanelParts::kPackedCodeBytes +
                      Q6_KPanelParts::kTrailerBytes ==
                  model::kQ6_KPanelBlockBytes,
              "Q6_KPanelParts must add up to a q6_K panel block");

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avx_vnni";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
    case Isa::kNeon:
      return "neon";
    case Isa::kNeonDotprod:
      return "neon_dotprod";
    case Isa::kNeonI8mm:
      return "neon_i8mm";
  }
  return "unknown";
}

bool Batch1PrefetchIntoL2() {
#if defined(__x86_64__)
  static const bool l2 = !__builtin_cpu_is("amd");
  return l2;
#else
  return true;
#endif
}

bool IsaSupported(Isa isa) {
  if (isa == Isa::kScalar) return true;
#if defined(__x86_64__)
  // __builtin_cpu_supports also checks that the OS saves the wider registers (XCR0).
  switch (isa) {
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kAvxVnni:
      return IsaSupported(Isa::kAvx2) && __builtin_cpu_supports("avxvnni");
    case Isa::kAvx512:
      return IsaSupported(Isa::kAvx2) && __builtin_cpu_supports("avx512f");
    case Isa::kAvx512Vnni:
      return IsaSupported(Isa::kAvx512) && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    case Isa::kAvx512Bf16:
      return IsaSupported(Isa::kAvx512Vnni) && __builtin_cpu_supports("avx512bf16");
    default:
      return false;
  }
#elif defined(__aarch64__) && defined(__linux__)
  // The kernel reports what the CPU implements and it enables (the auxiliary vector).
  switch (isa) {
    case Isa::kNeon:
      return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
    case Isa::kNeonDotprod:
      return IsaSupported(Isa::kNeon) && (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
    case Isa::kNeonI8mm:
      return IsaSupported(Isa::kNeonDotprod) && (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
    default:
      return false;
  }
#else
  return false;
#endif
}

Isa BestIsa() {
  for (auto it = std::rbegin(kAllIsas); it != std::rend(kAllIsas); ++it) {
    if (IsaSupported(*it)) return *it;
  }
  return Isa::kScalar;
}

const KernelSet& KernelsFor(Isa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case Isa::kAvx512Bf16:
      return Avx512Bf16Kernels();
    case Isa::kAvx512Vnni:
      return Avx512VnniKernels();
    case Isa::kAvx512:
      return Avx512Kernels();
    case Isa::kAvxVnni:
      return AvxVnniKernels();
    case Isa::kAvx2:
      return Avx2Kernels();
#elif defined(__aarch64__)
    case Isa::kNeonI8mm:
      return NeonI8mmKernels();
    case Isa::kNeonDotprod:
      return NeonDotprodKernels();
    case Isa::kNeon:
      return NeonKernels();
#endif
    default:
      break;
  }
  return ScalarKernels();
}

}  // namespace kvserve::backends::cpu_blas
