// The optimized CPU backend: every new token of a step, across all sequences, is stacked
// into one activation matrix, so each projection is one matrix product over all rows
// (OpenBLAS sgemm for many rows; for few rows, SIMD kernels that stream each weight row
// once for all of them, reading f16/bf16 weights as stored). Attention runs per
// (sequence, KV head, chunk of query rows) in parallel: prefill chunks as two sgemm
// products over the KV head's positions gathered to f32 (the query heads sharing the KV
// head stacked as rows), decode rows with vectorised dot products over the paged K/V.
//
// Files: step_plan.h (rows, attention tasks and logit rows of a step, as data),
// attention.h (the attention of a planned step), gemm.h (projections), simd_kernels.h,
// thread_pool.h; cpu_blas_backend.cc runs the layers.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_CPU_BLAS_BACKEND_H_
#define KVSERVE_BACKENDS_CPU_BLAS_CPU_BLAS_BACKEND_H_

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "backends/cpu_blas/gemm.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "model/kv_layout.h"
#include "model/model.h"

namespace kvserve::backends {

struct CpuBlasOptions {
  // Threads for kernels and attention, counting the caller of Forward;
  // 0 = std::thread::hardware_concurrency(). Default 0.
  int threads = 0;
  // Kernel level. Default (nullopt): the best the CPU supports. Tests force lower levels;
  // forcing a level the CPU lacks is FAILED_PRECONDITION.
  std::optional<cpu_blas::Isa> isa;
  // Crossover between streaming kernels and OpenBLAS, tile size (see GemmOptions).
  cpu_blas::GemmOptions gemm;
};

// Results equal the reference backend's up to float summation order (vector lanes,
// sgemm blocking); see cpu_blas_backend_test.cc for the tolerances.
//
// OpenBLAS: Create sets OpenBLAS to one thread process-wide; this backend calls it from
// its own pool, one tile per thread, so OpenBLAS and pool threads never oversubscribe.
// Threading: Forward is not reentrant (see Backend); the backend owns `threads - 1`
// worker threads that sleep between steps. Holds the model by reference (it must
// outlive the backend) and owns only scratch buffers.
class CpuBlasBackend : public Backend {
 public:
  // INVALID_ARGUMENT when `kv_layout` does not fit the model or threads < 0;
  // FAILED_PRECONDITION when options.isa is not supported by this CPU, or when the model
  // holds panels (model::LoadOptions::panels) that the kernels `options` selects cannot
  // read (f32, bf16, q4_0, q8_0, q4_K, q6_K: the scalar or a NEON level).
  // Where ReadsPanels(options) has a type of which the model holds row-major
  // projections, the backend packs copies of them (PackedWeights: resident twice).
  static absl::StatusOr<std::unique_ptr<CpuBlasBackend>> Create(const model::Model& model,
                                                                const model::KvLayout& kv_layout,
                                                                const CpuBlasOptions& options);
  // The weight types a backend made with `options` on this CPU multiplies in panel
  // layouts (cpu_blas::PanelsWanted: f32 from kernel level avx2 with
  // GemmOptions::f32_panels, bf16 from avx2 with bf16_panels, the q4_0, q8_0, q4_K and
  // q6_K from avx2 with quant_panels), so a model loaded for such
  // backends alone should be loaded with LoadOptions::panels set to them (engine::LoadModel does).
  static model::PanelTypes ReadsPanels(const CpuBlasOptions& options);
  ~CpuBlasBackend() override;

  std::string name() const override { return "cpu_blas"; }
  const model::KvLayout& kv_layout() const override;
  // As Backend::Forward; additionally INVALID_ARGUMENT when a KV block pointer is not
  // aligned to the KV element size.
  absl::Status Forward(const Batch& batch, std::span<float> logits) override;

  cpu_blas::Isa isa() const;
  int threads() const;

 private:
  struct State;
  explicit CpuBlasBackend(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kvserve::backends

#endif  // KVSERVE_BACKENDS_CPU_BLAS_CPU_BLAS_BACKEND_H_
