// The cpu_blas backend's view of the model weights: the Model's own tensors, with bf16 and
// quantized projection matrices in the panel layouts of KernelSet::matmul_bf16_panels,
// matmul_q4_0_panels, ... (model/panels.h) where the kernel level has them: as
// the Model holds them when it was loaded with LoadOptions::panels (the server), otherwise packed
// copies owned here (tests, benchmarks, any caller sharing one Model between backends).
#ifndef KVSERVE_BACKENDS_CPU_BLAS_PACKED_WEIGHTS_H_
#define KVSERVE_BACKENDS_CPU_BLAS_PACKED_WEIGHTS_H_

#include <cstdint>

#include "common/huge_page_memory.h"
#include "model/panels.h"
#include "model/tensor.h"
#include "model/weights.h"

namespace kvserve::backends::cpu_blas {

// A copy of one matrix in its panel layout, in huge pages (for benchmarks and tests).
class PanelMatrix {
 public:
  // Precondition: model::PanelsFit(w). Aborts when the memory cannot be mapped.
  explicit PanelMatrix(const model::TensorView& w);
  // The packed matrix (in model::PanelLayoutOf(w.type)), valid while this object lives.
  const model::TensorView& view() const { return view_; }

 private:
  common::HugePageMemory memory_;
  model::TensorView view_;
};

class PackedWeights {
 public:
  // A copy of `weights` in which every projection matrix of a type in `types` that fits
  // its panel layout (row-major, so not those the Model packed itself) is replaced by a
  // packed copy, a tied output included (model::PackPanels); the Model's bytes stay as
  // they are, so such a model is resident twice. When the copies cannot be mapped
  // nothing is packed (the kernels on row-major weights run instead). `weights` (the
  // Model) must outlive this object.
  PackedWeights(const model::ModelWeights& weights, const model::PanelTypes& types);

  const model::ModelWeights& weights() const { return weights_; }

 private:
  model::ModelWeights weights_;
  common::HugePageMemory memory_;
};

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_PACKED_WEIGHTS_H_
