#include "backends/cpu_blas/packed_weights.h"

#include <cstdlib>
#include <utility>

#include "model/bf16_panels.h"

namespace kvserve::backends::cpu_blas {

Bf16PanelMatrix::Bf16PanelMatrix(const model::TensorView& w) {
  absl::StatusOr<common::HugePageMemory> memory =
      common::HugePageMemory::Allocate(static_cast<size_t>(w.rows * w.cols) * sizeof(uint16_t));
  if (!memory.ok()) std::abort();
  memory_ = *std::move(memory);
  auto* out = reinterpret_cast<uint16_t*>(memory_.data());
  model::PackBf16Panels(static_cast<const uint16_t*>(w.data), w.cols, 0,
                        w.rows / model::kBf16PanelRows, out);
  view_ = model::TensorView{w.type, out, w.rows, w.cols, model::Layout::kBf16Panels};
}

PackedWeights::PackedWeights(const model::ModelWeights& weights, bool bf16_panels)
    : weights_(weights) {
  if (!bf16_panels) return;
  model::ModelWeights packed = weights;
  absl::StatusOr<common::HugePageMemory> memory =
      model::PackBf16Panels(packed, model::PanelPackOptions{.pack_tied_output = true});
  if (!memory.ok()) return;
  weights_ = std::move(packed);
  memory_ = *std::move(memory);
}

}  // namespace kvserve::backends::cpu_blas
