#include "backends/cpu_blas/blas_core.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kvserve::backends::cpu_blas {
namespace {

struct CoreGeneration {
  const char* name;
  int generation;
};

// Every x86-64 core name of OpenBLAS 0.3.21's DYNAMIC_ARCH build (driver/others/dynamic.c).
constexpr CoreGeneration kCores[] = {
    {"Katmai", 1},  {"Coppermine", 1},  {"Northwood", 1}, {"Prescott", 1},     {"Banias", 1},
    {"Atom", 1},    {"Athlon", 1},      {"Opteron", 1},   {"Opteron_SSE3", 1}, {"Barcelona", 1},
    {"Nano", 1},    {"Bobcat", 1},      {"Core2", 2},     {"Penryn", 2},       {"Dunnington", 2},
    {"Nehalem", 3}, {"Sandybridge", 4}, {"Bulldozer", 4}, {"Piledriver", 4},   {"Steamroller", 4},
    {"Haswell", 5}, {"Zen", 5},         {"Excavator", 5}, {"SkylakeX", 6},     {"Cooperlake", 6},
};

}  // namespace

CpuFeatures DetectCpuFeatures() {
  CpuFeatures cpu;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  cpu.amd = __builtin_cpu_is("amd");
  cpu.sse3 = __builtin_cpu_supports("sse3");
  cpu.ssse3 = __builtin_cpu_supports("ssse3");
  cpu.sse4_2 = __builtin_cpu_supports("sse4.2");
  cpu.avx = __builtin_cpu_supports("avx");
  cpu.avx2 = __builtin_cpu_supports("avx2");
  cpu.fma = __builtin_cpu_supports("fma");
  cpu.avx512f = __builtin_cpu_supports("avx512f");
  cpu.avx512bw = __builtin_cpu_supports("avx512bw");
  cpu.avx512vl = __builtin_cpu_supports("avx512vl");
  cpu.avx512dq = __builtin_cpu_supports("avx512dq");
  cpu.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  return cpu;
}

std::string CpuFeatureList(const CpuFeatures& cpu) {
  const std::pair<bool, const char*> features[] = {
      {cpu.avx512f, "avx512f"},
      {cpu.avx512bw, "avx512bw"},
      {cpu.avx512vl, "avx512vl"},
      {cpu.avx512dq, "avx512dq"},
      {cpu.avx512bf16, "avx512bf16"},
      {cpu.avx2, "avx2"},
      {cpu.fma, "fma"},
      {cpu.avx, "avx"},
      {cpu.sse4_2, "sse4.2"},
      {cpu.ssse3, "ssse3"},
      {cpu.sse3, "sse3"},
  };
  std::vector<std::string> present;
  for (const auto& [has, name] : features) {
    if (has) present.push_back(name);
  }
  return present.empty() ? "none" : absl::StrJoin(present, " ");
}

std::string_view BestBlasCore(const CpuFeatures& cpu) {
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq) {
    return cpu.avx512bf16 ? "Cooperlake" : "SkylakeX";
  }
  if (cpu.avx2 && cpu.fma) return cpu.amd ? "Zen" : "Haswell";
  if (cpu.avx) return "Sandybridge";
  if (cpu.sse4_2) return "Nehalem";
  if (cpu.ssse3) return "Core2";
  return "Prescott";
}

std::optional<int> BlasCoreGeneration(std::string_view core) {
  const std::string name(core);
  for (const CoreGeneration& c : kCores) {
    if (absl::EqualsIgnoreCase(c.name, name)) return c.generation;
  }
  return std::nullopt;
}

std::string BlasReexecMarkerValue(std::string_view chosen_core, std::string_view target_core) {
  return absl::StrCat(std::string(chosen_core), ">", std::string(target_core));
}

BlasCoreDecision DecideBlasCore(const CpuFeatures& cpu, std::string_view chosen_name,
                                const BlasCoreEnv& env, bool reexec_enabled) {
  const std::string chosen_core(chosen_name);
  const std::string best(BestBlasCore(cpu));
  const std::optional<int> chosen_generation = BlasCoreGeneration(chosen_core);
  // Generation of `best` is always known (it comes from kCores' names).
  const int best_generation = *BlasCoreGeneration(best);
  BlasCoreDecision d;
  d.target_core = chosen_core;
  d.degraded = chosen_generation.has_value() && *chosen_generation < best_generation;
  const std::string cpu_says =
      absl::StrCat("best for this CPU (", CpuFeatureList(cpu), "): ", best);

  if (env.marker.has_value()) {
    const std::pair<std::string, std::string> from_to = absl::StrSplit(*env.marker, '>');
    if (env.coretype.has_value() && absl::EqualsIgnoreCase(*env.coretype, from_to.second)) {
      d.reason =
          absl::StrCat("BLAS core ", chosen_core, ": OpenBLAS had chosen ", from_to.first,
                       ", re-executed with OPENBLAS_CORETYPE=", *env.coretype, "; ", cpu_says);
      if (d.degraded) absl::StrAppend(&d.reason, " (OpenBLAS did not take it: degraded)");
      return d;
    }
  }
  if (env.coretype.has_value()) {
    d.reason = absl::StrCat("BLAS core ", chosen_core, ": OPENBLAS_CORETYPE=", *env.coretype,
                            " set by the user, kept; ", cpu_says);
    if (d.degraded) absl::StrAppend(&d.reason, " (degraded)");
    return d;
  }
  if (!chosen_generation.has_value()) {
    d.reason = absl::StrCat("BLAS core ", chosen_core, ": chosen by OpenBLAS, a core kvserve ",
                            "does not know, kept; ", cpu_says);
    return d;
  }
  if (!d.degraded) {
    d.reason = absl::StrCat("BLAS core ", chosen_core, ": chosen by OpenBLAS; ", cpu_says);
    return d;
  }
  if (!reexec_enabled) {
    d.reason = absl::StrCat("BLAS core ", chosen_core, ": chosen by OpenBLAS, older than the ",
                            cpu_says, "; not re-executing (--blas_reexec=false): degraded");
    return d;
  }
  d.reexec = true;
  d.target_core = best;
  d.degraded = false;
  d.reason = absl::StrCat("BLAS core ", chosen_core, ": chosen by OpenBLAS, older than the ",
                          cpu_says, "; re-executing with OPENBLAS_CORETYPE=", best);
  return d;
}

}  // namespace kvserve::backends::cpu_blas
