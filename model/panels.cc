#include "model/panels.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace kvserve::model {
namespace {

static_assert(kQ4_0PanelBlockBytes == kPanelRows * kQ4_0BlockBytes);
static_assert(kQ8_0PanelBlockBytes == kPanelRows * kQ8_0BlockBytes);
static_assert(kQ4_KPanelBlockBytes == kPanelRows * kQ4_KBlockBytes);
static_assert(kQ6_KPanelBlockBytes == kPanelRows * kQ6_KBlockBytes);

// Where a quantized type's block keeps its lone f16 (the bytes that are not a whole
// 4-byte word; the panel block puts the 16 rows' copies first), or -1 when the block is
// whole words (q4_K: d and dmin make one word).
int HalfAt(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ8_0:
      return 0;
    case DType::kQ6_K:
      return 208;
    default:
      return -1;
  }
}

// q6_K: the words of the scales (lines 48-51 of a panel block) have their middle bytes
// swapped (panels.h).
constexpr int kQ6_KScaleLine = 48;

// The whole pages inside [data, data + bytes), handed back (see PanelPackOptions).
void ReleasePages(const void* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  // A hint: on failure the pages simply stay resident.
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// The projection matrices of a layer (those the panel layouts are for).
// With experts: the router, the shared experts' and every expert's matrices (the dense
// FFN views are empty).
template <typename Layer>
auto Projections(Layer& layer) {
  std::vector<decltype(&layer.wq)> views{&layer.wq,     &layer.wk,   &layer.wv,    &layer.wo,
                                         &layer.w_gate, &layer.w_up, &layer.w_down};
  if (layer.router.data == nullptr) return views;
  views.push_back(&layer.router);
  if (layer.shared_gate.data != nullptr) {
    for (auto* shared : {&layer.shared_gate, &layer.shared_up, &layer.shared_down}) {
      views.push_back(shared);
    }
  }
  for (auto* experts : {&layer.expert_gate, &layer.expert_up, &layer.expert_down}) {
    for (auto& w : *experts) views.push_back(&w);
  }
  return views;
}

// Both layouts take exactly the row-major bytes of the matrix.
size_t AlignedBytes(const TensorView& w) {
  return (static_cast<size_t>(w.rows) * w.row_bytes() + 63) / 64 * 64;
}

bool Fits(const TensorView& w, const PanelTypes& types) {
  return types.has(w.type) && PanelsFit(w);
}

// The float layouts: word k (4 bytes: an f32, a bf16 pair) of row r of a matrix with
// `words` per row, for the panels [panel_begin, panel_end), at line k of r's panel, r % 16
// words into it.
void PackWordPanels(const uint8_t* w, int64_t words, int64_t panel_begin, int64_t panel_end,
                    uint8_t* out) {
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    uint8_t* panel = out + p * kPanelRows * words * 4;
    for (int64_t r = 0; r < kPanelRows; ++r) {
      const uint8_t* src = w + (p * kPanelRows + r) * words * 4;
      for (int64_t k = 0; k < words; ++k) {
        std::memcpy(panel + (k * kPanelRows + r) * 4, src + 4 * k, 4);
      }
    }
  }
}

bool RowMajorPanels(const TensorView& w) {
  return w.layout == Layout::kRows && w.rows > 0 && w.rows % kPanelRows == 0 && w.cols > 0;
}

}  // namespace

bool FloatPanelsFit(const TensorView& w) {
  return (w.type == DType::kF32 || (w.type == DType::kBF16 && w.cols % 2 == 0)) &&
         RowMajorPanels(w);
}

bool QuantPanelsFit(const TensorView& w) {
  return IsQuantized(w.type) && PanelLayoutOf(w.type) != Layout::kRows && RowMajorPanels(w) &&
         w.cols % DTypeBlockElems(w.type) == 0;
}

bool PanelsFit(const TensorView& w) { return FloatPanelsFit(w) || QuantPanelsFit(w); }

Layout PanelLayoutOf(DType type) {
  switch (type) {
    case DType::kF32:
      return Layout::kF32Panels;
    case DType::kBF16:
      return Layout::kBf16Panels;
    case DType::kQ4_0:
      return Layout::kQ4_0Panels;
    case DType::kQ8_0:
      return Layout::kQ8_0Panels;
    case DType::kQ4_K:
      return Layout::kQ4_KPanels;
    case DType::kQ6_K:
      return Layout::kQ6_KPanels;
    default:
      return Layout::kRows;
  }
}

bool PanelTypes::*PanelTypes::FlagOf(DType type) {
  switch (type) {
    case DType::kF32:
      return &PanelTypes::f32;
    case DType::kBF16:
      return &PanelTypes::bf16;
    case DType::kQ4_0:
      return &PanelTypes::q4_0;
    case DType::kQ8_0:
      return &PanelTypes::q8_0;
    case DType::kQ4_K:
      return &PanelTypes::q4_k;
    case DType::kQ6_K:
      return &PanelTypes::q6_k;
    default:
      return nullptr;
  }
}

bool PanelTypes::has(DType type) const {
  bool PanelTypes::*flag = FlagOf(type);
  return flag != nullptr && this->*flag;
}

void PanelTypes::set(DType type, bool value) {
  if (bool PanelTypes::*flag = FlagOf(type)) this->*flag = value;
}

PanelTypes PanelTypesOf(const ModelWeights& weights) {
  PanelTypes types;
  auto add = [&](const TensorView& w) {
    if (w.layout != Layout::kRows) types.set(w.type, true);
  };
  add(weights.token_embedding);
  add(weights.output);
  for (const LayerWeights& layer : weights.layers) {
    for (const TensorView* w : Projections(layer)) add(*w);
  }
  return types;
}

bool HasPanels(const ModelWeights& weights) { return PanelTypesOf(weights).any(); }

void PackF32Panels(const float* w, int64_t cols, int64_t panel_begin, int64_t panel_end,
                   float* out) {
  PackWordPanels(reinterpret_cast<const uint8_t*>(w), cols, panel_begin, panel_end,
                 reinterpret_cast<uint8_t*>(out));
}

void PackBf16Panels(const uint16_t* w, int64_t cols, int64_t panel_begin, int64_t panel_end,
                    uint16_t* out) {
  PackWordPanels(reinterpret_cast<const uint8_t*>(w), cols / 2, panel_begin, panel_end,
                 reinterpret_cast<uint8_t*>(out));
}

void PackQuantPanels(DType type, const uint8_t* w, int64_t cols, int64_t panel_begin,
                     int64_t panel_end, uint8_t* out) {
  // Every format: a block is its lone f16 (if any) and whole 4-byte words, in order.
  const int64_t block_bytes = DTypeBytes(type, static_cast<size_t>(DTypeBlockElems(type)));
  const int half_at = HalfAt(type);
  const int64_t lines_at = half_at < 0 ? 0 : 2 * kPanelRows;
  const int words = static_cast<int>(block_bytes - (half_at < 0 ? 0 : 2)) / 4;
  const int64_t blocks = cols / DTypeBlockElems(type);
  const int64_t row_bytes = blocks * block_bytes;
  const int64_t panel_block_bytes = kPanelRows * block_bytes;
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* pb = out + (p * blocks + b) * panel_block_bytes;
      for (int64_t r = 0; r < kPanelRows; ++r) {
        const uint8_t* src = w + (p * kPanelRows + r) * row_bytes + b * block_bytes;
        if (half_at >= 0) std::memcpy(pb + 2 * r, src + half_at, 2);
        for (int j = 0; j < words; ++j) {
          // The words skip the lone f16 (before them, or after them for q6_K).
          const int at = 4 * j + (half_at == 0 ? 2 : 0);
          uint8_t* line = pb + lines_at + 64 * j + 4 * r;
          std::memcpy(line, src + at, 4);
          if (type == DType::kQ6_K && j >= kQ6_KScaleLine) std::swap(line[1], line[2]);
        }
      }
    }
  }
}

Layout PackMatrixPanels(const TensorView& w, uint8_t* out, int threads) {
  auto pack = [&](int64_t begin, int64_t end) {
    if (w.type == DType::kF32) {
      PackF32Panels(static_cast<const float*>(w.data), w.cols, begin, end,
                    reinterpret_cast<float*>(out));
    } else if (w.type == DType::kBF16) {
      PackBf16Panels(static_cast<const uint16_t*>(w.data), w.cols, begin, end,
                     reinterpret_cast<uint16_t*>(out));
    } else {
      PackQuantPanels(w.type, static_cast<const uint8_t*>(w.data), w.cols, begin, end, out);
    }
  };
  const int64_t panels = w.rows / kPanelRows;
  const int64_t parts = std::clamp<int64_t>(threads, 1, panels);
  std::vector<std::thread> helpers;
  helpers.reserve(static_cast<size_t>(parts - 1));
  // Part i: panels [panels * i / parts, panels * (i + 1) / parts); the caller packs part 0,
  // and any part no thread could be started for.
  for (int64_t i = 1; i < parts; ++i) {
    try {
      helpers.emplace_back(pack, panels * i / parts, panels * (i + 1) / parts);
    } catch (const std::system_error&) {
      pack(panels * i / parts, panels * (i + 1) / parts);
    }
  }
  pack(0, panels / parts);
  for (std::thread& t : helpers) t.join();
  return PanelLayoutOf(w.type);
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
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  for (TensorView* w : views) {
    const Layout layout = PackMatrixPanels(*w, next, threads);
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
