#include "backends/cpu_blas/blas_core.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::backends::cpu_blas {
namespace {

using ::testing::HasSubstr;

CpuFeatures Avx512(bool bf16) {
  CpuFeatures cpu;
  cpu.sse3 = cpu.ssse3 = cpu.sse4_2 = cpu.avx = cpu.avx2 = cpu.fma = true;
  cpu.avx512f = cpu.avx512bw = cpu.avx512vl = cpu.avx512dq = true;
  cpu.avx512bf16 = bf16;
  return cpu;
}

CpuFeatures Avx2(bool amd) {
  CpuFeatures cpu;
  cpu.sse3 = cpu.ssse3 = cpu.sse4_2 = cpu.avx = cpu.avx2 = cpu.fma = true;
  cpu.amd = amd;
  return cpu;
}

TEST(BestBlasCoreTest, FollowsTheFeatures) {
  EXPECT_EQ(BestBlasCore(Avx512(false)), "SkylakeX");
  EXPECT_EQ(BestBlasCore(Avx512(true)), "Cooperlake");
  CpuFeatures amd_avx512 = Avx512(true);
  amd_avx512.amd = true;  // Zen 4: OpenBLAS's AVX-512 kernels, not its Zen (AVX2) core
  EXPECT_EQ(BestBlasCore(amd_avx512), "Cooperlake");
  EXPECT_EQ(BestBlasCore(Avx2(false)), "Haswell");
  EXPECT_EQ(BestBlasCore(Avx2(true)), "Zen");
  CpuFeatures partial = Avx512(false);
  partial.avx512vl = false;  // AVX-512 F without VL (Knights Landing): AVX2 core
  EXPECT_EQ(BestBlasCore(partial), "Haswell");
  CpuFeatures avx_only = Avx2(false);
  avx_only.avx2 = avx_only.fma = false;
  EXPECT_EQ(BestBlasCore(avx_only), "Sandybridge");
  CpuFeatures sse42;
  sse42.sse3 = sse42.ssse3 = sse42.sse4_2 = true;
  EXPECT_EQ(BestBlasCore(sse42), "Nehalem");
  sse42.sse4_2 = false;
  EXPECT_EQ(BestBlasCore(sse42), "Core2");
  EXPECT_EQ(BestBlasCore(CpuFeatures{}), "Prescott");
}

TEST(BlasCoreGenerationTest, RanksKnownCoresCaseInsensitively) {
  EXPECT_EQ(BlasCoreGeneration("Prescott"), 1);
  EXPECT_EQ(BlasCoreGeneration("haswell"), 5);
  EXPECT_EQ(BlasCoreGeneration("ZEN"), BlasCoreGeneration("Haswell"));
  EXPECT_EQ(BlasCoreGeneration("Cooperlake"), BlasCoreGeneration("SkylakeX"));
  EXPECT_LT(*BlasCoreGeneration("Sandybridge"), *BlasCoreGeneration("Haswell"));
  EXPECT_EQ(BlasCoreGeneration("SapphireRapids"), std::nullopt);
  EXPECT_EQ(BlasCoreGeneration(""), std::nullopt);
}

TEST(DecideBlasCoreTest, FallbackWithoutSettingReexecutesWithTheBestCore) {
  const BlasCoreDecision d = DecideBlasCore(Avx512(false), "Prescott", {}, true);
  EXPECT_TRUE(d.reexec);
  EXPECT_EQ(d.target_core, "SkylakeX");
  EXPECT_FALSE(d.degraded);
  EXPECT_THAT(d.reason, HasSubstr("re-executing with OPENBLAS_CORETYPE=SkylakeX"));
  EXPECT_THAT(d.reason, HasSubstr("Prescott"));
  // AVX2-only AMD falls back from Sandybridge to Zen.
  const BlasCoreDecision amd = DecideBlasCore(Avx2(true), "Sandybridge", {}, true);
  EXPECT_TRUE(amd.reexec);
  EXPECT_EQ(amd.target_core, "Zen");
}

TEST(DecideBlasCoreTest, BestGenerationIsKept) {
  for (const char* core : {"SkylakeX", "Cooperlake", "skylakex"}) {
    const BlasCoreDecision d = DecideBlasCore(Avx512(true), core, {}, true);
    EXPECT_FALSE(d.reexec) << core;
    EXPECT_FALSE(d.degraded) << core;
    EXPECT_EQ(d.target_core, core);
    EXPECT_THAT(d.reason, HasSubstr("chosen by OpenBLAS;"));
  }
  // Excavator (AVX2 AMD before Zen) is as new as the Zen core: no re-exec.
  EXPECT_FALSE(DecideBlasCore(Avx2(true), "Excavator", {}, true).reexec);
}

TEST(DecideBlasCoreTest, ReexecDisabledKeepsTheFallbackAsDegraded) {
  const BlasCoreDecision d = DecideBlasCore(Avx512(false), "Haswell", {}, false);
  EXPECT_FALSE(d.reexec);
  EXPECT_TRUE(d.degraded);
  EXPECT_EQ(d.target_core, "Haswell");
  EXPECT_THAT(d.reason, HasSubstr("--blas_reexec=false"));
}

TEST(DecideBlasCoreTest, UserSettingAlwaysWins) {
  const BlasCoreDecision older =
      DecideBlasCore(Avx512(false), "Prescott", {.coretype = "Prescott"}, true);
  EXPECT_FALSE(older.reexec);
  EXPECT_TRUE(older.degraded);
  EXPECT_THAT(older.reason, HasSubstr("OPENBLAS_CORETYPE=Prescott set by the user, kept"));
  const BlasCoreDecision same =
      DecideBlasCore(Avx512(false), "SkylakeX", {.coretype = "SkylakeX"}, true);
  EXPECT_FALSE(same.reexec);
  EXPECT_FALSE(same.degraded);
  // A marker left over from another process, naming another core, does not make the
  // user's setting ours.
  const BlasCoreDecision stale = DecideBlasCore(
      Avx512(false), "Nehalem", {.coretype = "Nehalem", .marker = "Prescott>SkylakeX"}, true);
  EXPECT_FALSE(stale.reexec);
  EXPECT_THAT(stale.reason, HasSubstr("set by the user"));
}

TEST(DecideBlasCoreTest, MarkerStopsASecondReexec) {
  const BlasCoreEnv env = {.coretype = "SkylakeX",
                           .marker = BlasReexecMarkerValue("Prescott", "SkylakeX")};
  const BlasCoreDecision d = DecideBlasCore(Avx512(false), "SkylakeX", env, true);
  EXPECT_FALSE(d.reexec);
  EXPECT_FALSE(d.degraded);
  EXPECT_THAT(
      d.reason,
      HasSubstr("OpenBLAS had chosen Prescott, re-executed with OPENBLAS_CORETYPE=SkylakeX"));
  // OpenBLAS ignored the setting: still no loop, but degraded.
  const BlasCoreDecision ignored = DecideBlasCore(Avx512(false), "Prescott", env, true);
  EXPECT_FALSE(ignored.reexec);
  EXPECT_TRUE(ignored.degraded);
}

TEST(DecideBlasCoreTest, UnknownCoreIsKeptAndNotDegraded) {
  const BlasCoreDecision d = DecideBlasCore(Avx512(true), "SapphireRapids", {}, true);
  EXPECT_FALSE(d.reexec);
  EXPECT_FALSE(d.degraded);
  EXPECT_THAT(d.reason, HasSubstr("does not know"));
}

TEST(DetectCpuFeaturesTest, AgreesWithItself) {
  const CpuFeatures cpu = DetectCpuFeatures();
  // AVX-512 BW/VL/DQ imply F; AVX2 implies AVX (on every CPU that exists).
  EXPECT_TRUE(!cpu.avx512bw || cpu.avx512f);
  EXPECT_TRUE(!cpu.avx2 || cpu.avx);
  EXPECT_TRUE(BlasCoreGeneration(BestBlasCore(cpu)).has_value());
}

}  // namespace
}  // namespace kvserve::backends::cpu_blas
