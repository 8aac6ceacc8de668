#include "backends/cpu_blas/simd_kernels.h"

namespace kvserve::backends::cpu_blas {

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "unknown";
}

bool IsaSupported(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_supports also checks that the OS saves the wider registers (XCR0).
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return IsaSupported(Isa::kAvx2) && __builtin_cpu_supports("avx512f");
    case Isa::kAvx512Vnni:
      return IsaSupported(Isa::kAvx512) && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    case Isa::kAvx512Bf16:
      return IsaSupported(Isa::kAvx512Vnni) && __builtin_cpu_supports("avx512bf16");
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

Isa BestIsa() {
  if (IsaSupported(Isa::kAvx512Bf16)) return Isa::kAvx512Bf16;
  if (IsaSupported(Isa::kAvx512Vnni)) return Isa::kAvx512Vnni;
  if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

const KernelSet& KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Bf16:
      return Avx512Bf16Kernels();
    case Isa::kAvx512Vnni:
      return Avx512VnniKernels();
    case Isa::kAvx512:
      return Avx512Kernels();
    case Isa::kAvx2:
      return Avx2Kernels();
    case Isa::kScalar:
      break;
  }
  return ScalarKernels();
}

}  // namespace kvserve::backends::cpu_blas
