#include "backends/cpu_blas/packed_weights.h"

#include <cstdlib>
#include <utility>

namespace kvserve::backends::cpu_blas {

PanelMatrix::PanelMatrix(const model::TensorView& w) {
  absl::StatusOr<common::HugePageMemory> memory =
      common::HugePageMemory::Allocate(static_cast<size_t>(w.rows) * w.row_bytes());
  if (!memory.ok()) std::abort();
  memory_ = *std::move(memory);
  const int64_t panels = w.rows / model::kPanelRows;
  if (w.type == model::DType::kBF16) {
    model::PackBf16Panels(static_cast<const uint16_t*>(w.data), w.cols, 0, panels,
                          reinterpret_cast<uint16_t*>(memory_.data()));
    view_ = model::TensorView{w.type, memory_.data(), w.rows, w.cols, model::Layout::kBf16Panels};
  } else {
    model::PackQuantPanels(w.type, static_cast<const uint8_t*>(w.data), w.cols, 0, panels,
                           memory_.data());
    view_ = model::TensorView{
        w.type, memory_.data(), w.rows, w.cols,
        w.type == model::DType::kQ4_0 ? model::Layout::kQ4_0Panels : model::Layout::kQ8_0Panels};
  }
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
