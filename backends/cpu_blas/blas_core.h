// Which OpenBLAS core (kernel family) this process should run, as a pure decision.
//
// Debian's OpenBLAS is built with DYNAMIC_ARCH: when the library loads it reads CPUID and
// picks one of its cores (Prescott, Haswell, SkylakeX, ...). A release older than the CPU
// may not recognise it and fall back to an old core (Debian 12's 0.3.21 runs Prescott's
// SSE3 kernels on some AVX-512 Xeons: prefill about 3x slower). The only way to change the
// core is OPENBLAS_CORETYPE, read once at load, so a binary that finds a fallback sets it
// and re-executes itself (see blas_startup.h). This file holds the decision, free of side
// effects, so every case is unit-tested; blas_startup.h gathers the inputs and acts.
//
// Threading: every function is pure (DetectCpuFeatures only reads CPUID) and thread-safe.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_BLAS_CORE_H_
#define KVSERVE_BACKENDS_CPU_BLAS_BLAS_CORE_H_

#include <optional>
#include <string>
#include <string_view>

namespace kvserve::backends::cpu_blas {

// The CPU features the choice of core depends on (each also checked to be enabled by the
// OS, as __builtin_cpu_supports does).
struct CpuFeatures {
  bool amd = false;  // vendor AuthenticAMD (AVX2-only AMD CPUs run OpenBLAS's Zen core)
  bool sse3 = false;
  bool ssse3 = false;
  bool sse4_2 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512bf16 = false;
};

// This CPU's features (CPUID via __builtin_cpu_supports / __builtin_cpu_is); all false
// off x86.
CpuFeatures DetectCpuFeatures();

// "avx512f avx512bw avx512vl avx512dq avx512bf16 avx2 fma" style list of the features
// above that are present, best first (for log lines).
std::string CpuFeatureList(const CpuFeatures& cpu);

// The newest core of Debian 12's OpenBLAS 0.3.21 whose kernels this CPU can run:
//   avx512 f+bw+vl+dq (+bf16) -> SkylakeX (Cooperlake);  avx2+fma -> Haswell (AMD: Zen);
//   avx -> Sandybridge;  sse4.2 -> Nehalem;  ssse3 -> Core2;  otherwise Prescott.
// (0.3.21 has no newer x86 core: no SapphireRapids, no Zen 4.)
std::string_view BestBlasCore(const CpuFeatures& cpu);

// The SIMD generation of an OpenBLAS core's sgemm kernels, to compare two cores:
// 1 SSE2/SSE3 (Prescott, Atom, Opteron, Barcelona, ...), 2 SSSE3 (Core2, Penryn,
// Dunnington), 3 SSE4.2 (Nehalem), 4 AVX (Sandybridge, Bulldozer, Piledriver,
// Steamroller), 5 AVX2 (Haswell, Zen, Excavator), 6 AVX-512 (SkylakeX, Cooperlake).
// Case-insensitive, as OpenBLAS reads OPENBLAS_CORETYPE. nullopt for a name not listed.
std::optional<int> BlasCoreGeneration(std::string_view core);

// What the process environment says about the core.
struct BlasCoreEnv {
  // OPENBLAS_CORETYPE as found at start; nullopt when unset or empty.
  std::optional<std::string> coretype;
  // The re-exec marker (kBlasReexecMarker) as found at start; nullopt when unset. A
  // process that re-executes sets it to "<core OpenBLAS chose>><core set>", e.g.
  // "Prescott>SkylakeX".
  std::optional<std::string> marker;
};

// Environment variable that marks a process as re-executed by EnsureBestBlasCore (guards
// against a loop when OpenBLAS ignores OPENBLAS_CORETYPE).
inline constexpr char kBlasReexecMarker[] = "KVSERVE_BLAS_REEXEC";

struct BlasCoreDecision {
  // True: set OPENBLAS_CORETYPE=`target_core` and the marker, then re-execute.
  bool reexec = false;
  // The core to run with when reexec; otherwise the core OpenBLAS runs now.
  std::string target_core;
  // The core that is (reexec: will be) running is of an older generation than
  // BestBlasCore(cpu): the user asked for it, the re-exec is disabled, or OpenBLAS
  // ignored OPENBLAS_CORETYPE. An unknown core name is never called degraded.
  bool degraded = false;
  // One line for the log: what runs and why.
  std::string reason;
};

// Decides from the CPU's features, the core OpenBLAS chose at load
// (openblas_get_corename()), the environment and whether re-executing is allowed:
// - OPENBLAS_CORETYPE set by the user (no marker, or a marker naming another core): keep
//   what runs; the user's setting always wins.
// - marker present and OPENBLAS_CORETYPE equal to the core it names: this is the
//   re-executed process; keep what runs (never re-execute twice).
// - chosen core unknown, or of the best generation for this CPU: keep.
// - chosen core older than BestBlasCore(cpu): re-execute with the best core if
//   `reexec_enabled`, else keep (degraded).
BlasCoreDecision DecideBlasCore(const CpuFeatures& cpu, std::string_view chosen_core,
                                const BlasCoreEnv& env, bool reexec_enabled);

// The marker value a re-executing process sets: "<chosen>><target>".
std::string BlasReexecMarkerValue(std::string_view chosen_core, std::string_view target_core);

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_BLAS_CORE_H_
