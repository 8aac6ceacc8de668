#include "backends/backend.h"

#include "absl/strings/str_cat.h"
#include "backends/cpu_blas/cpu_blas_backend.h"
#include "backends/reference/reference_backend.h"

namespace kvserve::backends {
namespace {

CpuBlasOptions CpuBlasOptionsFrom(const BackendOptions& options) {
  CpuBlasOptions cpu_options;
  cpu_options.threads = options.threads;
  cpu_options.gemm.f32_panels = options.f32_panels;
  cpu_options.gemm.bf16_panels = options.bf16_panels;
  cpu_options.gemm.quant_panels = options.quant_panels;
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
    absl::StatusOr<std::unique_ptr<CpuBlasBackend>> backend =
        CpuBlasBackend::Create(model, kv_layout, CpuBlasOptionsFrom(options));
    if (!backend.ok()) return backend.status();
    return std::unique_ptr<Backend>(std::move(*backend));
  }
  // Other backends register here, one `if (name == ...)` each.
  return absl::NotFoundError(
      absl::StrCat("unknown backend \"", name, "\" (known: reference, cpu_blas)"));
}

model::PanelTypes BackendReadsPanels(const std::string& name, const BackendOptions& options) {
  if (name != "cpu_blas") return {};
  return CpuBlasBackend::ReadsPanels(CpuBlasOptionsFrom(options));
}

}  // namespace kvserve::backends
