#include "model/bf16_panels.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <utility>
#include <vector>

namespace kvserve::model {
namespace {

// The whole pages inside [data, data + bytes), handed back (see PanelPackOptions).
void ReleasePages(const void* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  // A hint: on failure the pages simply stay resident.
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// The projection matrices of a layer (those the panel layout is for).
template <typename Layer>
auto Projections(Layer& layer) {
  return std::array{&layer.wq,     &layer.wk,   &layer.wv,    &layer.wo,
                    &layer.w_gate, &layer.w_up, &layer.w_down};
}

size_t AlignedBytes(const TensorView& w) {
  return (static_cast<size_t>(w.rows * w.cols) * sizeof(uint16_t) + 63) / 64 * 64;
}

}  // namespace

bool Bf16PanelsFit(const TensorView& w) {
  return w.type == DType::kBF16 && w.layout == Layout::kRows && w.rows > 0 &&
         w.rows % kBf16PanelRows == 0 && w.cols > 0 && w.cols % 2 == 0;
}

bool HasBf16Panels(const ModelWeights& weights) {
  auto panels = [](const TensorView& w) { return w.layout == Layout::kBf16Panels; };
  if (panels(weights.token_embedding) || panels(weights.output)) return true;
  for (const LayerWeights& layer : weights.layers) {
    for (const TensorView* w : Projections(layer)) {
      if (panels(*w)) return true;
    }
  }
  return false;
}

void PackBf16Panels(const uint16_t* w, int64_t cols, int64_t panel_begin, int64_t panel_end,
                    uint16_t* out) {
  const int64_t pairs = cols / 2;
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    uint16_t* panel = out + p * kBf16PanelRows * cols;
    for (int64_t j = 0; j < kBf16PanelRows; ++j) {
      const uint16_t* src = w + (p * kBf16PanelRows + j) * cols;
      for (int64_t k = 0; k < pairs; ++k) {
        std::memcpy(panel + (k * kBf16PanelRows + j) * 2, src + 2 * k, 2 * sizeof(uint16_t));
      }
    }
  }
}

absl::StatusOr<common::HugePageMemory> PackBf16Panels(ModelWeights& weights,
                                                      const PanelPackOptions& options) {
  std::vector<TensorView*> views;
  for (LayerWeights& layer : weights.layers) {
    for (TensorView* w : Projections(layer)) {
      if (Bf16PanelsFit(*w)) views.push_back(w);
    }
  }
  const bool tied = weights.output.data == weights.token_embedding.data;
  if (Bf16PanelsFit(weights.output) && (!tied || options.pack_tied_output)) {
    views.push_back(&weights.output);
  }
  size_t total = 0;
  for (const TensorView* w : views) total += AlignedBytes(*w);
  if (total == 0) return common::HugePageMemory();
  absl::StatusOr<common::HugePageMemory> memory = common::HugePageMemory::Allocate(total);
  if (!memory.ok()) return memory.status();
  uint8_t* next = memory->data();
  for (TensorView* w : views) {
    auto* out = reinterpret_cast<uint16_t*>(next);
    PackBf16Panels(static_cast<const uint16_t*>(w->data), w->cols, 0, w->rows / kBf16PanelRows,
                   out);
    // (Never the token embedding's bytes: a tied output is packed only as a copy.)
    if (options.release_originals && w->data != weights.token_embedding.data) {
      ReleasePages(w->data, w->rows * w->row_bytes());
    }
    next += AlignedBytes(*w);
    *w = TensorView{w->type, out, w->rows, w->cols, Layout::kBf16Panels};
  }
  return memory;
}

}  // namespace kvserve::model
