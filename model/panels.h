// The panel layouts of weight matrices (Layout::kF32Panels, kBf16Panels, kQ4_0Panels,
// kQ8_0Panels, kQ4_KPanels, kQ6_KPanels) and the packing of a model's projection matrices into
// them. A panel layout is what the cpu_blas panel kernels read (KernelSet::matmul_bf16_panels,
// matmul_f32_panels, ...): one pass over the weights serves many activation rows, each weight
// vector holds 16 rows (no horizontal sums), and the weights stream in address order
// (docs/performance.md, "bf16 weights in 16-row panels", "q4_0 and q8_0 weights in 16-row
// panels", "q4_K and q6_K weights in 16-row panels" and "f32 weights in 16-row panels").
//
// f32: element (r, c) of a [rows, cols] matrix with rows % 16 == 0 is at
//   (r / 16) * 16 * cols + c * 16 + r % 16
// i.e. panels of 16 rows, each panel as columns, column c of every row of the panel in
// one 64-byte line.
//
// bf16: element (r, c) of a [rows, cols] matrix with rows % 16 == 0 and cols % 2 == 0 is
// at
//   (r / 16) * 16 * cols + (c / 2) * 32 + (r % 16) * 2 + c % 2
// i.e. panels of 16 rows, each panel as column pairs, the pair of every row of the panel
// in one 64-byte line.
//
// q4_0: the same bytes as the row-major blocks (18 per 32 elements: an f16 scale d and
// 16 bytes whose byte i holds the 4-bit code of element i in its low nibble and of
// element i + 16 in its high one; element = d * (code - 8)), regrouped per panel of 16
// rows and block column b (32 elements) into 288 bytes at (p * cols / 32 + b) * 288:
//   bytes 0-31:   the 16 rows' scales d (f16), row r at 2r
//   bytes 32-287: four 64-byte lines; line j holds code-byte word j (bytes 4j .. 4j + 3)
//                 of each row, row r at 32 + 64j + 4r
// so line j's low nibbles are elements 4j .. 4j + 3 and its high nibbles 16 + 4j ..
// 19 + 4j of all 16 rows: one vpdpbusd operand each after a mask or a shift.
//
// q8_0: likewise (34 bytes per 32 elements: d, then 32 int8 codes), regrouped into 544
// bytes at (p * cols / 32 + b) * 544: the 16 scales, then eight 64-byte lines, line j
// holding codes 4j .. 4j + 3 of each row, row r at 32 + 64j + 4r.
//
// The k-quants likewise, per panel and block column b of 256 elements (one ggml block
// per row), at (p * cols / 256 + b) * 16 * block bytes; line j is 64 bytes holding 4-byte
// word j of each row, row r at 4r:
// q4_K (144 bytes: f16 d, f16 dmin, 12 scale bytes, 128 code bytes): 2304 bytes, 36
//   lines: line 0 the (d, dmin) words, lines 1-3 the scale words (so line 1 holds the
//   rows' sub-block scales 0-3 in the low 6 bits of each byte, line 2 their mins 0-3,
//   line 3 the low 4 bits of scales and mins 4-7, as ggml's get_scale_min_k4), lines
//   4 + 8i + k code word k of the i-th 32 code bytes: elements 64i + 4k .. 64i + 4k + 3
//   in the low nibbles, 64i + 32 + 4k .. in the high ones.
// q6_K (210 bytes: ql[128], qh[64], int8 scales[16], f16 d): 3360 bytes: the 16 rows' d
//   (f16, row r at 2r), then 52 lines at 32 + 64j: lines 0-31 the ql words, 32-47 the qh
//   words, 48-51 the scale words with their middle bytes swapped (line 48 + t holds the
//   scales of groups 4t, 4t + 2, 4t + 1, 4t + 3 of each row, so that the int16 halves of a
//   word sign-extended pair the groups 4t, 4t + 1 and 4t + 2, 4t + 3, as the activations'
//   bsums words do).
#ifndef KVSERVE_MODEL_PANELS_H_
#define KVSERVE_MODEL_PANELS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/huge_page_memory.h"
#include "model/tensor.h"
#include "model/weights.h"

namespace kvserve::model {

// Rows per panel, every layout.
inline constexpr int64_t kPanelRows = 16;
// Bytes of one panel block: q4_0 and q8_0 16 rows x 32 elements, q4_K and q6_K 16 rows x
// 256 elements.
inline constexpr int64_t kQ4_0PanelBlockBytes = 288;
inline constexpr int64_t kQ8_0PanelBlockBytes = 544;
inline constexpr int64_t kQ4_KPanelBlockBytes = 2304;
inline constexpr int64_t kQ6_KPanelBlockBytes = 3360;

// True when `w` can take the panel layout of its float type: f32 or bf16, row-major,
// rows a positive multiple of kPanelRows, cols positive (and even for bf16).
bool FloatPanelsFit(const TensorView& w);

// True when `w` can take its quantized type's panel layout: q4_0, q8_0, q4_K or q6_K,
// row-major, rows a positive multiple of kPanelRows, cols positive (a whole number of
// blocks, as every such row).
bool QuantPanelsFit(const TensorView& w);

// FloatPanelsFit(w) || QuantPanelsFit(w).
bool PanelsFit(const TensorView& w);

// The panel layout of `type`'s matrices (kRows for a type without one).
Layout PanelLayoutOf(DType type);

// out = w (f32, row-major, `cols` per row) in the panel layout, for the panels
// [panel_begin, panel_end) (rows 16 * panel_begin up to 16 * panel_end). Precondition: as
// FloatPanelsFit; out holds the whole matrix and does not alias w.
void PackF32Panels(const float* w, int64_t cols, int64_t panel_begin, int64_t panel_end,
                   float* out);

// The same for bf16 bits (cols even).
void PackBf16Panels(const uint16_t* w, int64_t cols, int64_t panel_begin, int64_t panel_end,
                    uint16_t* out);

// The same for blocks of a quantized type with a panel layout (`type`; w: row-major,
// whole blocks per row). Precondition: as QuantPanelsFit; out holds the whole matrix and
// does not alias w.
void PackQuantPanels(DType type, const uint8_t* w, int64_t cols, int64_t panel_begin,
                     int64_t panel_end, uint8_t* out);

// out = w in its panel layout (w.rows * w.row_bytes() bytes), returned, packed by
// `threads` threads (>= 1: the caller and threads - 1 more, each a range of panels).
// Precondition: PanelsFit(w); out does not alias w.
Layout PackMatrixPanels(const TensorView& w, uint8_t* out, int threads = 1);

// Which types a reader takes in panels.
struct PanelTypes {
  bool f32 = false;
  bool bf16 = false;
  bool q4_0 = false;
  bool q8_0 = false;
  bool q4_k = false;
  bool q6_k = false;
  bool any() const { return f32 || bf16 || q4_0 || q8_0 || q4_k || q6_k; }
  // The flag of `type` (false for a type without a panel layout).
  bool has(DType type) const;
  // Sets the flag of `type` to `value` (nothing for a type without a panel layout).
  void set(DType type, bool value);

 private:
  // The member holding `type`'s flag, nullptr for a type without a panel layout.
  static bool PanelTypes::*FlagOf(DType type);
};

// True when any matrix of `weights` is in a panel layout.
bool HasPanels(const ModelWeights& weights);

// The panel types the matrices of `weights` are in.
PanelTypes PanelTypesOf(const ModelWeights& weights);

struct PanelPackOptions {
  // The types to pack (a matrix of another type stays row-major).
  PanelTypes types;
  // Also pack an output (LM head) that is tied to the token embedding, as a copy (the
  // embedding itself is looked up by row and stays row-major).
  bool pack_tied_output = false;
  // After packing each matrix, hand the whole memory pages of its row-major bytes back to
  // the kernel (madvise MADV_DONTNEED: file-backed pages are read again if touched,
  // anonymous ones read as zeros). Only for an owner of the weights that keeps no other
  // view of those bytes (Model::Load).
  bool release_originals = false;
  // Threads that pack each matrix (PackMatrixPanels); 0 or less = one per core.
  int threads = 1;
};

// Replaces every projection matrix of `weights` (wq, wk, wv, wo, w_gate, w_up, w_down of
// each layer, or its router and experts' matrices, and the output as `options` says) of a type in
// options.types that fits its panel layout with a packed copy in one huge-page region (each matrix
// 64-byte aligned), which it returns; the views of `weights` then point into it
// (PanelLayoutOf(type)). The region is empty (no mapping) when nothing fits. RESOURCE_EXHAUSTED
// when the region cannot be mapped (`weights` untouched).
absl::StatusOr<common::HugePageMemory> PackPanels(ModelWeights& weights,
                                                  const PanelPackOptions& options);

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_PANELS_H_
