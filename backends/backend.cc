#include "backends/backend.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cpu_blas/bf16_products.h"
#include "backends/cpu_blas/cpu_blas_backend.h"
#include "backends/reference/reference_backend.h"

namespace kvserve::backends {
namespace {

absl::StatusOr<CpuBlasOptions> CpuBlasOptionsFrom(const BackendOptions& options) {
  CpuBlasOptions cpu_options;
  if (!options.kernel_level.empty()) {
    for (cpu_blas::Isa isa : cpu_blas::kAllIsas) {
      if (cpu_blas::IsaName(isa) == options.kernel_level) cpu_options.isa = isa;
    }
    if (!cpu_options.isa.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown kernel level \"", options.kernel_level, "\" (known: ",
          absl::StrJoin(
              cpu_blas::kAllIsas, ", ",
              [](std::string* out, cpu_blas::Isa isa) { out->append(cpu_blas::IsaName(isa)); }),
          ")"));
    }
  }
  cpu_options.threads = options.threads;
  cpu_options.gemm.f32_panels = options.f32_panels;
  cpu_options.gemm.bf16_panels = options.bf16_panels;
  const std::optional<cpu_blas::Bf16PanelKernel> bf16_kernel =
      cpu_blas::ParseBf16PanelKernel(options.bf16_panel_kernel);
  if (!bf16_kernel.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown bf16 panel kernel \"",
                                                   options.bf16_panel_kernel,
                                                   "\" (known: auto, dpbf16, fma)"));
  }
  cpu_options.gemm.bf16_panel_kernel = *bf16_kernel;
  cpu_options.gemm.quant_panels = options.quant_panels;
  cpu_options.gemm.quant_unpack = options.quant_unpack;
  cpu_options.gemm.batch_invariant = options.batch_invariant;
  return cpu_options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& name,
                                                       const model::Model& model,
                                                       const model::KvLayout& kv_layout,
                                                       const BackendOptions& options) {
  if (name == "reference") {
    absl::StatusOr<std::unique_ptr<ReferenceBackend>> backend =
        ReferenceBackend::Create(model, kv_layout);
    if (!backend.ok()) return backend.status();
    return std::unique_ptr<Backend>(std::move(*backend));
  }
  if (name == "cpu_blas") {
    absl::StatusOr<CpuBlasOptions> cpu_options = CpuBlasOptionsFrom(options);
    if (!cpu_options.ok()) return cpu_options.status();
    absl::StatusOr<std::unique_ptr<CpuBlasBackend>> backend =
        CpuBlasBackend::Create(model, kv_layout, *cpu_options);
    if (!backend.ok()) return backend.status();
    return std::unique_ptr<Backend>(std::move(*backend));
  }
  // Other backends register here, one `if (name == ...)` each.
  return absl::NotFoundError(
      absl::StrCat("unknown backend \"", name, "\" (known: reference, cpu_blas)"));
}

model::PanelTypes BackendReadsPanels(const std::string& name, const BackendOptions& options) {
  if (name != "cpu_blas") return {};
  absl::StatusOr<CpuBlasOptions> cpu_options = CpuBlasOptionsFrom(options);
  return cpu_options.ok() ? CpuBlasBackend::ReadsPanels(*cpu_options) : model::PanelTypes{};
}

}  // namespace kvserve::backends
