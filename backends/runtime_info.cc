#include "backends/runtime_info.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cpu_blas/bf16_products.h"
#include "backends/cpu_blas/blas_startup.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "common/build_version.h"

namespace kvserve::backends {

RuntimeInfo DescribeRuntime(std::string_view backend, const cpu_blas::BlasCoreDecision& blas) {
  RuntimeInfo info;
  info.version = common::kVersion;
  info.commit = common::kGitCommit;
  info.backend = std::string(backend);
  const cpu_blas::Isa isa = backend == "cpu_blas" ? cpu_blas::BestIsa() : cpu_blas::Isa::kScalar;
  info.kernel_level = std::string(cpu_blas::IsaName(isa));
  if (isa == cpu_blas::Isa::kAvx512Bf16) {
    const cpu_blas::Bf16PanelProbe& probe = cpu_blas::ProbeBf16PanelKernels();
    info.bf16_panel_kernel = std::string(cpu_blas::Bf16PanelKernelName(probe.best));
    info.bf16_panel_reason = probe.reason;
  }
  info.blas_core = cpu_blas::OpenBlasCoreName();
  info.blas_config = cpu_blas::OpenBlasConfig();
  info.blas_reason = blas.reason;
  info.blas_core_degraded = blas.degraded;
  info.kernels_degraded = backend == "cpu_blas" && isa == cpu_blas::Isa::kScalar;
  return info;
}

std::string DegradedPaths(const RuntimeInfo& info) {
  std::vector<std::string> paths;
  if (info.blas_core_degraded) paths.push_back("blas_core");
  if (info.kernels_degraded) paths.push_back("simd_kernels");
  return paths.empty() ? "none" : absl::StrJoin(paths, ", ");
}

std::string FormatVersion(std::string_view program, const RuntimeInfo& info) {
  return absl::StrCat(std::string(program), " ", info.version, "\ncommit: ", info.commit,
                      "\nbackend: ", info.backend, "\nkernel level: ", info.kernel_level,
                      info.bf16_panel_kernel.empty()
                          ? std::string()
                          : absl::StrCat("\nbf16 panel kernel: ", info.bf16_panel_kernel),
                      "\nBLAS core: ", info.blas_core, "\nOpenBLAS config: ", info.blas_config,
                      "\ndegraded: ", DegradedPaths(info), "\n");
}

}  // namespace kvserve::backends
