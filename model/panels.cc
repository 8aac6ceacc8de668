#include "model/panels.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <utility>
#include <vector>

namespace kvserve::model {
namespace {

static_assert(kQ4_0PanelBlockBytes == kPanelRows * kQ4_0BlockBytes);
static_assert(kQ8_0PanelBlockBytes == kPanelRows * kQ8_0BlockBytes);

// The whole pages inside [data, data + bytes), handed back (see PanelPackOptions).
void ReleasePages(const void* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  // A hint: on failure the pages simply stay resident.
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// The projection matrices of a layer (those the panel layouts are for).
template <typename Layer>
auto Projections(Layer& layer) {
  return std::array{&layer.wq,     &layer.wk,   &layer.wv,    &layer.wo,
                    &layer.w_gate, &layer.w_up, &layer.w_down};
}

// Both layouts take exactly the row-major bytes of the matrix.
size_t AlignedBytes(const TensorView& w) {
  return (static_cast<size_t>(w.rows) * w.row_bytes() + 63) / 64 * 64;
}

bool Fits(const TensorView& w, const PanelTypes& types) {
  return (types.bf16 && Bf16PanelsFit(w)) || (types.q4_0 && Q4_0PanelsFit(w)) ||
         (types.q8_0 && Q8_0PanelsFit(w));
}

bool RowMajorPanels(const TensorView& w) {
  return w.layout == Layout::kRows && w.rows > 0 && w.rows % kPanelRows == 0 && w.cols > 0;
}

}  // namespace

bool Bf16PanelsFit(const TensorView& w) {
  return w.type == DType::kBF16 && RowMajorPanels(w) && w.cols % 2 == 0;
}

bool Q4_0PanelsFit(const TensorView& w) {
  return w.type == DType::kQ4_0 && RowMajorPanels(w) && w.cols % kQ4_0BlockElems == 0;
}

bool Q8_0PanelsFit(const TensorView& w) {
  return w.type == DType::kQ8_0 && RowMajorPanels(w) && w.cols % kQ8_0BlockElems == 0;
}

PanelTypes PanelTypesOf(const ModelWeights& weights) {
  PanelTypes types;
  auto add = [&](const TensorView& w) {
    types.bf16 |= w.layout == Layout::kBf16Panels;
    types.q4_0 |= w.layout == Layout::kQ4_0Panels;
    types.q8_0 |= w.layout == Layout::kQ8_0Panels;
  };
  add(weights.token_embedding);
  add(weights.output);
  for (const LayerWeights& layer : weights.layers) {
    for (const TensorView* w : Projections(layer)) add(*w);
  }
  return types;
}

bool HasPanels(const ModelWeights& weights) { return PanelTypesOf(weights).any(); }

void PackBf16Panels(const uint16_t* w, int64_t cols, int64_t panel_begin, int64_t panel_end,
                    uint16_t* out) {
  const int64_t pairs = cols / 2;
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    uint16_t* panel = out + p * kPanelRows * cols;
    for (int64_t j = 0; j < kPanelRows; ++j) {
      const uint16_t* src = w + (p * kPanelRows + j) * cols;
      for (int64_t k = 0; k < pairs; ++k) {
        std::memcpy(panel + (k * kPanelRows + j) * 2, src + 2 * k, 2 * sizeof(uint16_t));
      }
    }
  }
}

void PackQuantPanels(DType type, const uint8_t* w, int64_t cols, int64_t panel_begin,
                     int64_t panel_end, uint8_t* out) {
  // Both formats: 32 elements per block, an f16 d, then `words` 4-byte words of codes.
  const int64_t block_bytes = type == DType::kQ4_0 ? kQ4_0BlockBytes : kQ8_0BlockBytes;
  const int words = static_cast<int>(block_bytes - 2) / 4;
  const int64_t blocks = cols / 32;
  const int64_t row_bytes = blocks * block_bytes;
  const int64_t panel_block_bytes = kPanelRows * block_bytes;
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* pb = out + (p * blocks + b) * panel_block_bytes;
      for (int64_t r = 0; r < kPanelRows; ++r) {
        const uint8_t* src = w + (p * kPanelRows + r) * row_bytes + b * block_bytes;
        std::memcpy(pb + 2 * r, src, 2);  // d
        for (int j = 0; j < words; ++j) {
          std::memcpy(pb + 32 + 64 * j + 4 * r, src + 2 + 4 * j, 4);
        }
      }
    }
  }
}

Layout PackMatrixPanels(const TensorView& w, uint8_t* out) {
  const int64_t panels = w.rows / kPanelRows;
  if (w.type == DType::kBF16) {
    PackBf16Panels(static_cast<const uint16_t*>(w.data), w.cols, 0, panels,
                   reinterpret_cast<uint16_t*>(out));
    return Layout::kBf16Panels;
  }
  PackQuantPanels(w.type, static_cast<const uint8_t*>(w.data), w.cols, 0, panels, out);
  return w.type == DType::kQ4_0 ? Layout::kQ4_0Panels : Layout::kQ8_0Panels;
}

absl::StatusOr<common::HugePageMemory> PackPanels(ModelWeights& weights,
                                                  const PanelPackOptions& options) {
  std::vector<TensorView*> views;
  for (LayerWeights& layer : weights.layers) {
    for (TensorView* w : Projections(layer)) {
      if (Fits(*w, options.types)) views.push_back(w);
    }
  }
  const bool tied = weights.output.data == weights.token_embedding.data;
  if (Fits(weights.output, options.types) && (!tied || options.pack_tied_output)) {
    views.push_back(&weights.output);
  }
  size_t total = 0;
  for (const TensorView* w : views) total += AlignedBytes(*w);
  if (total == 0) return common::HugePageMemory();
  absl::StatusOr<common::HugePageMemory> memory = common::HugePageMemory::Allocate(total);
  if (!memory.ok()) return memory.status();
  uint8_t* next = memory->data();
  for (TensorView* w : views) {
    const Layout layout = PackMatrixPanels(*w, next);
    // (Never the token embedding's bytes: a tied output is packed only as a copy.)
    if (options.release_originals && w->data != weights.token_embedding.data) {
      ReleasePages(w->data, w->rows * w->row_bytes());
    }
    *w = TensorView{w->type, next, w->rows, w->cols, layout};
    next += AlignedBytes(*w);
  }
  return memory;
}

}  // namespace kvserve::model
