#include "backends/runtime_info.h"

#include "backends/cpu_blas/blas_startup.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::backends {
namespace {

using ::testing::HasSubstr;

TEST(RuntimeInfoTest, DescribesTheDispatchAndTheCore) {
  cpu_blas::BlasCoreDecision blas;
  blas.reason = "BLAS core X: why";
  const RuntimeInfo info = DescribeRuntime("cpu_blas", blas);
  EXPECT_EQ(info.backend, "cpu_blas");
  EXPECT_EQ(info.kernel_level, cpu_blas::IsaName(cpu_blas::BestIsa()));
  EXPECT_EQ(info.blas_core, cpu_blas::OpenBlasCoreName());
  EXPECT_THAT(info.blas_config, HasSubstr("OpenBLAS"));
  EXPECT_FALSE(info.version.empty());
  EXPECT_FALSE(info.commit.empty());
  EXPECT_EQ(info.kernels_degraded, cpu_blas::BestIsa() == cpu_blas::Isa::kScalar);
  EXPECT_FALSE(info.blas_core_degraded);

  const RuntimeInfo reference = DescribeRuntime("reference", blas);
  EXPECT_EQ(reference.kernel_level, "scalar");
  EXPECT_FALSE(reference.kernels_degraded);
}

TEST(RuntimeInfoTest, FormatsVersionAndDegradedPaths) {
  RuntimeInfo info{.version = "1.2.3",
                   .commit = "abc",
                   .backend = "cpu_blas",
                   .kernel_level = "scalar",
                   .blas_core = "Prescott",
                   .blas_config = "OpenBLAS 0.3.21",
                   .blas_reason = "",
                   .blas_core_degraded = true,
                   .kernels_degraded = true};
  EXPECT_EQ(FormatVersion("kvserve", info),
            "kvserve 1.2.3\ncommit: abc\nbackend: cpu_blas\nkernel level: scalar\n"
            "BLAS core: Prescott\nOpenBLAS config: OpenBLAS 0.3.21\n"
            "degraded: blas_core, simd_kernels\n");
  info.blas_core_degraded = info.kernels_degraded = false;
  EXPECT_EQ(DegradedPaths(info), "none");
}

}  // namespace
}  // namespace kvserve::backends
