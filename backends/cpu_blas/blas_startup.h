// Start-up of every binary that runs OpenBLAS (kvserve and the bench tools): make the
// process run the best OpenBLAS core for this CPU, re-executing itself once with
// OPENBLAS_CORETYPE when OpenBLAS fell back to an older core (decision: blas_core.h).
//
// This is process-level code for main() only: it reads the environment, may setenv and
// execv, and logs to stderr. OpenBLAS picks its core when the library loads, before
// main() runs, and its pthread build starts its worker threads then too; execv replaces
// the whole process image (those threads included), so call EnsureBestBlasCore before the
// program starts threads or opens anything of its own.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_BLAS_STARTUP_H_
#define KVSERVE_BACKENDS_CPU_BLAS_BLAS_STARTUP_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "backends/cpu_blas/blas_core.h"

namespace kvserve::backends::cpu_blas {

// Help text of the --blas_reexec flag (default true) each such binary defines in its
// *_main.cc and passes to EnsureBestBlasCore.
inline constexpr char kBlasReexecFlagHelp[] =
    "When OpenBLAS picked an older core than this CPU supports (e.g. Debian 12's OpenBLAS "
    "0.3.21 runs its SSE3 'Prescott' kernels on CPUs it does not know) and "
    "OPENBLAS_CORETYPE is unset, set OPENBLAS_CORETYPE to the best core and re-execute "
    "once at start. An explicit OPENBLAS_CORETYPE always wins. false = keep OpenBLAS's "
    "choice (logged as degraded).";

// The core OpenBLAS runs (openblas_get_corename()), e.g. "SkylakeX".
std::string OpenBlasCoreName();
// OpenBLAS's build configuration (openblas_get_config()), e.g.
// "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64".
std::string OpenBlasConfig();

// OPENBLAS_CORETYPE and kBlasReexecMarker from the process environment.
BlasCoreEnv ReadBlasCoreEnv();

// Sets OPENBLAS_CORETYPE=decision.target_core and the marker
// (BlasReexecMarkerValue(chosen_core, target)), then execv("/proc/self/exe", argv) with
// the same argv. Returns only when the exec failed: INTERNAL with errno's text (the
// environment variables are then unset again). Precondition: decision.reexec.
absl::Status ReexecWithBlasCore(const BlasCoreDecision& decision, std::string_view chosen_core,
                                char** argv);

// DecideBlasCore(DetectCpuFeatures(), chosen_core, ReadBlasCoreEnv(), reexec_enabled);
// re-executes when it says so (does not return then, unless the exec fails: logged, and
// the process goes on with chosen_core, degraded). Logs the decision as one line
// "<program>: <reason>" on stderr ("<program>: warning: <reason>" when degraded) and
// returns the decision of the process that goes on. `argv` is main()'s, null-terminated.
BlasCoreDecision EnsureBestBlasCoreFrom(std::string_view program, std::string_view chosen_core,
                                        bool reexec_enabled, char** argv);

// EnsureBestBlasCoreFrom with the core OpenBLAS chose at load (OpenBlasCoreName()).
BlasCoreDecision EnsureBestBlasCore(std::string_view program, bool reexec_enabled, char** argv);

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_BLAS_STARTUP_H_
