#include "backends/cpu_blas/bf16_products.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_format.h"
#include "model/dtype.h"
#include "model/panels.h"

namespace kvserve::backends::cpu_blas {
namespace {

constexpr int64_t kProbeRows = 4 * model::kPanelRows;
constexpr int64_t kProbeCols = 2048;
constexpr int kProbeActRows = 8;
constexpr int kCallsPerRound = 16;
constexpr int kRounds = 7;

// Deterministic bf16 bits: mostly values of magnitude 2^-8 .. 2^0, a few denormals and
// zeros (where vdpbf16ps reads denormals as zero).
uint16_t ProbeBf16(uint32_t& state) {
  state = state * 1664525u + 1013904223u;
  const uint32_t r = state >> 8;
  const uint32_t sign = (r & 1) << 15;
  const uint32_t mantissa = (r >> 1) & 0x7F;
  const uint32_t pick = (r >> 8) & 63;
  const uint32_t exponent = pick == 0 ? 0 : 119 + pick % 9;  // 1/64 denormal or zero
  return static_cast<uint16_t>(sign | exponent << 7 | mantissa);
}

Bf16PanelProbe Measure() {
  Bf16PanelProbe probe;
  if (!IsaSupported(Isa::kAvx512Bf16)) {
    probe.reason = "bf16 panel products: no avx512bf16 on this CPU";
    return probe;
  }
  const KernelSet& k = KernelsFor(Isa::kAvx512Bf16);
  if (k.matmul_bf16_panels == nullptr || k.matmul_bf16_panels_fma == nullptr) {
    probe.reason = "bf16 panel products: vdpbf16ps (the level has no FMA kernel)";
    return probe;
  }
  probe.available = true;
  // Any bits are a valid panel buffer: the kernels read lines, not rows.
  uint32_t state = 12345;
  std::vector<uint16_t> w(kProbeRows * kProbeCols);
  for (uint16_t& v : w) v = ProbeBf16(state);
  const int64_t ldxb = Bf16DotStride(kProbeCols);
  std::vector<uint16_t> xb(ldxb * kProbeActRows, 0);
  std::vector<float> xf(kProbeCols * kProbeActRows);
  for (int i = 0; i < kProbeActRows; ++i) {
    for (int64_t c = 0; c < kProbeCols; ++c) {
      const uint16_t v = ProbeBf16(state);
      xb[i * ldxb + c] = v;
      xf[i * kProbeCols + c] = model::BF16ToFloat(v);
    }
  }
  std::vector<float> y_dot(kProbeRows * kProbeActRows), y_fma(y_dot.size());
  auto dot = [&] {
    k.matmul_bf16_panels(w.data(), kProbeCols, 0, kProbeRows, xb.data(), ldxb, kProbeActRows,
                         y_dot.data(), kProbeRows);
  };
  auto fma = [&] {
    k.matmul_bf16_panels_fma(w.data(), kProbeCols, 0, kProbeRows, xf.data(), kProbeCols,
                             kProbeActRows, y_fma.data(), kProbeRows);
  };
  dot();
  fma();
  probe.same_bits = std::memcmp(y_dot.data(), y_fma.data(), y_dot.size() * sizeof(float)) == 0;
  auto time_us = [](auto&& fn) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCallsPerRound; ++i) fn();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
               .count() /
           kCallsPerRound;
  };
  probe.dpbf16_us = probe.fma_us = 1e300;
  for (int round = 0; round < kRounds; ++round) {
    probe.dpbf16_us = std::min(probe.dpbf16_us, time_us(dot));
    probe.fma_us = std::min(probe.fma_us, time_us(fma));
  }
  const bool faster = probe.fma_us < kBf16FmaMaxTimeShare * probe.dpbf16_us;
  probe.best = probe.same_bits && faster ? Bf16PanelKernel::kFma : Bf16PanelKernel::kDpbf16;
  probe.reason = absl::StrFormat(
      "bf16 panel products: %s (probe: vdpbf16ps %.1f us, widened to f32 + FMA %.1f us, %s)",
      probe.best == Bf16PanelKernel::kFma ? "widened to f32 + FMA" : "vdpbf16ps", probe.dpbf16_us,
      probe.fma_us,
      probe.same_bits ? "same bits"
                      : "different bits: this CPU's vdpbf16ps rounds otherwise, kept");
  return probe;
}

}  // namespace

std::string_view Bf16PanelKernelName(Bf16PanelKernel kernel) {
  switch (kernel) {
    case Bf16PanelKernel::kAuto:
      return "auto";
    case Bf16PanelKernel::kDpbf16:
      return "dpbf16";
    case Bf16PanelKernel::kFma:
      return "fma";
  }
  return "auto";
}

std::optional<Bf16PanelKernel> ParseBf16PanelKernel(std::string_view name) {
  for (Bf16PanelKernel k :
       {Bf16PanelKernel::kAuto, Bf16PanelKernel::kDpbf16, Bf16PanelKernel::kFma}) {
    if (name == Bf16PanelKernelName(k)) return k;
  }
  return std::nullopt;
}

const Bf16PanelProbe& ProbeBf16PanelKernels() {
  static const Bf16PanelProbe probe = Measure();
  return probe;
}

Bf16PanelKernel ResolveBf16PanelKernel(const KernelSet& kernels, Bf16PanelKernel requested) {
  if (kernels.matmul_bf16_panels_fma == nullptr) return Bf16PanelKernel::kDpbf16;
  if (requested == Bf16PanelKernel::kAuto) return ProbeBf16PanelKernels().best;
  return requested;
}

}  // namespace kvserve::backends::cpu_blas
