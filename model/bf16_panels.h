// The bf16 panel layout (Layout::kBf16Panels) and the packing of a model's projection
// matrices into it. The layout is what the cpu_blas kernel KernelSet::matmul_bf16_panels
// reads: one pass over the weights serves up to 16 activation rows, and the weights
// stream in address order (docs/performance.md, "bf16 weights in 16-row panels").
//
// Element (r, c) of a [rows, cols] matrix with rows % 16 == 0 and cols % 2 == 0 is at
//   (r / 16) * 16 * cols + (c / 2) * 32 + (r % 16) * 2 + c % 2
// i.e. panels of 16 rows, each panel as column pairs, the pair of every row of the panel
// in one 64-byte line.
#ifndef KVSERVE_MODEL_BF16_PANELS_H_
#define KVSERVE_MODEL_BF16_PANELS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/huge_page_memory.h"
#include "model/tensor.h"
#include "model/weights.h"

namespace kvserve::model {

inline constexpr int64_t kBf16PanelRows = 16;

// True when `w` can take the panel layout: bf16, row-major, rows a positive multiple of
// kBf16PanelRows, cols even and positive.
bool Bf16PanelsFit(const TensorView& w);

// out = w (bf16 bits, row-major, `cols` per row) in the panel layout, for the panels
// [panel_begin, panel_end) (rows 16 * panel_begin up to 16 * panel_end). Precondition: as
// Bf16PanelsFit; out holds the whole matrix and does not alias w.
void PackBf16Panels(const uint16_t* w, int64_t cols, int64_t panel_begin, int64_t panel_end,
                    uint16_t* out);

// True when any matrix of `weights` is in Layout::kBf16Panels.
bool HasBf16Panels(const ModelWeights& weights);

struct PanelPackOptions {
  // Also pack an output (LM head) that is tied to the token embedding, as a copy (the
  // embedding itself is looked up by row and stays row-major).
  bool pack_tied_output = false;
  // After packing each matrix, hand the whole memory pages of its row-major bytes back to
  // the kernel (madvise MADV_DONTNEED: file-backed pages are read again if touched,
  // anonymous ones read as zeros). Only for an owner of the weights that keeps no other
  // view of those bytes (Model::Load).
  bool release_originals = false;
};

// Replaces every projection matrix of `weights` (wq, wk, wv, wo, w_gate, w_up, w_down of
// each layer, and the output as `options` says) that Bf16PanelsFit with a packed copy
// in one huge-page region (each matrix 64-byte aligned), which it returns; the views of
// `weights` then point into it (Layout::kBf16Panels). The region is empty (no mapping)
// when nothing fits. RESOURCE_EXHAUSTED when the region cannot be mapped (`weights`
// untouched).
absl::StatusOr<common::HugePageMemory> PackBf16Panels(ModelWeights& weights,
                                                      const PanelPackOptions& options);

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_BF16_PANELS_H_
