// Which of the two bf16 panel kernels of kernel level avx512bf16 a process runs:
// KernelSet::matmul_bf16_panels (one vdpbf16ps per bf16 pair of 16 rows) or
// matmul_bf16_panels_fma (the pair widened to f32, two FMAs). Both compute vdpbf16ps as
// Intel defines it, so where the CPU follows that definition they give the same bits and
// only their speed differs, which depends on the microarchitecture, not on a CPUID flag:
// with 16 independent chains, Intel Emerald Rapids issues vdpbf16ps at a quarter of the
// FMA's rate (0.5 against 2 a cycle), where the FMA kernel multiplies twice as fast; on
// AMD Zen 5 bf16 prefill with vdpbf16ps ran at 1.6x f32 prefill (docs/performance.md), so
// there vdpbf16ps wins. So the choice is measured once per process, on this CPU.
//
// Threading: ProbeBf16PanelKernels is safe to call from any thread (measured on the first
// call, then a constant); the rest is pure.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_BF16_PRODUCTS_H_
#define KVSERVE_BACKENDS_CPU_BLAS_BF16_PRODUCTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "backends/cpu_blas/simd_kernels.h"

namespace kvserve::backends::cpu_blas {

enum class Bf16PanelKernel : uint8_t {
  kAuto,    // ProbeBf16PanelKernels().best
  kDpbf16,  // KernelSet::matmul_bf16_panels
  kFma,     // KernelSet::matmul_bf16_panels_fma
};

// "auto", "dpbf16", "fma".
std::string_view Bf16PanelKernelName(Bf16PanelKernel kernel);
// The inverse of Bf16PanelKernelName; nullopt for any other text.
std::optional<Bf16PanelKernel> ParseBf16PanelKernel(std::string_view name);

// The FMA kernel is chosen when it took less than this share of the vdpbf16ps kernel's
// time on the probe's product (and gave the same bits). Measured on Emerald Rapids: 0.57 to
// 0.75 (2-vCPU VM, server start-up beside); where vdpbf16ps issues as fast as an FMA
// the FMA kernel needs two instructions for its one: about 2 expected. A wrong choice
// costs speed only: it is made only between kernels that gave the same bits.
inline constexpr double kBf16FmaMaxTimeShare = 0.9;

struct Bf16PanelProbe {
  bool available = false;  // this CPU runs level avx512bf16 (both kernels exist)
  bool same_bits = false;  // both kernels gave the same bits on the probe's product
  double dpbf16_us = 0;    // best time of the probe's product, per kernel
  double fma_us = 0;
  Bf16PanelKernel best = Bf16PanelKernel::kDpbf16;  // never kAuto
  std::string reason;                               // one line for the start-up log
};

// Times both kernels on one L2-resident product (4 panels of 2048 columns against 8
// activation rows, rounds alternated, best of each) and compares their bits: a few
// milliseconds, on the first call only. Where the CPU lacks avx512bf16: available =
// false, best = kDpbf16 (the choice then does not matter: no bf16 panels are read).
const Bf16PanelProbe& ProbeBf16PanelKernels();

// The kernel a Gemm with these kernels runs for `requested`: kAuto resolved by
// ProbeBf16PanelKernels (only where `kernels` has both kernels; the probe runs then);
// kFma where the level has no FMA kernel falls back to kDpbf16.
Bf16PanelKernel ResolveBf16PanelKernel(const KernelSet& kernels, Bf16PanelKernel requested);

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_BF16_PRODUCTS_H_
