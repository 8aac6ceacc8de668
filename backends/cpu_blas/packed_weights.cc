#include "backends/cpu_blas/packed_weights.h"

#include <cstdlib>
#include <utility>

namespace kvserve::backends::cpu_blas {

PanelMatrix::PanelMatrix(const model::TensorView& w) {
  absl::StatusOr<common::HugePageMemory> memory =
      common::HugePageMemory::Allocate(static_cast<size_t>(w.rows) * w.row_bytes());
  if (!memory.ok()) std::abort();
  memory_ = *std::move(memory);
  view_ = model::TensorView{w.type, memory_.data(), w.rows, w.cols,
                            model::PackMatrixPanels(w, memory_.data())};
}

PackedWeights::PackedWeights(const model::ModelWeights& weights, const model::PanelTypes& types)
    : weights_(weights) {
  if (!types.any()) return;
  model::ModelWeights packed = weights;
  absl::StatusOr<common::HugePageMemory> memory =
      model::PackPanels(packed, model::PanelPackOptions{.types = types, .pack_tied_output = true});
  if (!memory.ok()) return;
  weights_ = std::move(packed);
  memory_ = *std::move(memory);
}

}  // namespace kvserve::backends::cpu_blas
