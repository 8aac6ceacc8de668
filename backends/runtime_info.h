// What a running binary computes with: version, commit, backend, the SIMD kernel level
// cpu_blas dispatches to and the OpenBLAS core, for `--version`, `kvserve-bench backend`'s header
// and the kvserve_build_info / kvserve_degraded_path metrics.
//
// Threading: plain data and pure functions.
#ifndef KVSERVE_BACKENDS_RUNTIME_INFO_H_
#define KVSERVE_BACKENDS_RUNTIME_INFO_H_

#include <string>
#include <string_view>

#include "backends/cpu_blas/blas_core.h"

namespace kvserve::backends {

struct RuntimeInfo {
  std::string version;  // common::kVersion
  std::string commit;   // common::kGitCommit ("unknown" outside git)
  std::string backend;  // "cpu_blas" or "reference"
  // cpu_blas: IsaName(BestIsa()) ("avx512bf16", "avx512vnni", "avx512", "avx_vnni", "avx2",
  // "scalar"; on AArch64 "neon_i8mm", "neon_dotprod", "neon");
  // reference: "scalar" (it has only portable code).
  std::string kernel_level;
  // cpu_blas at kernel level avx512bf16: the bf16 panel kernel that
  // --bf16_panel_kernel=auto runs here ("dpbf16" or "fma", cpu_blas::
  // ProbeBf16PanelKernels) and the probe's log line; else both empty.
  std::string bf16_panel_kernel;
  std::string bf16_panel_reason;
  std::string blas_core;    // the OpenBLAS core that runs, e.g. "SkylakeX"
  std::string blas_config;  // openblas_get_config()
  std::string blas_reason;  // the start-up decision's log line (BlasCoreDecision::reason)
  // The OpenBLAS core is older than this CPU supports (BlasCoreDecision::degraded).
  bool blas_core_degraded = false;
  // cpu_blas runs its portable scalar kernels (this CPU has no AVX2 + FMA + F16C).
  bool kernels_degraded = false;
};

// The info of this process for `backend`, with the core OpenBLAS runs now and the
// start-up decision `blas` (from EnsureBestBlasCore).
RuntimeInfo DescribeRuntime(std::string_view backend, const cpu_blas::BlasCoreDecision& blas);

// The text `<program> --version` prints: one "key: value" line each, e.g.
//   kvserve 0.1.0
//   commit: 1a2b3c4d5e6f
//   backend: cpu_blas
//   kernel level: avx512
//   bf16 panel kernel: fma    (only at kernel level avx512bf16)
//   BLAS core: SkylakeX
//   OpenBLAS config: OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...
//   degraded: none            (or "blas_core, simd_kernels")
std::string FormatVersion(std::string_view program, const RuntimeInfo& info);

// The names of the degraded paths ("blas_core", "simd_kernels"), comma-separated; "none".
std::string DegradedPaths(const RuntimeInfo& info);

}  // namespace kvserve::backends

#endif  // KVSERVE_BACKENDS_RUNTIME_INFO_H_
