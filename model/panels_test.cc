#include "model/panels.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::model {
namespace {

std::vector<uint16_t> RandomBits(std::mt19937& rng, size_t n) {
  std::vector<uint16_t> v(n);
  for (uint16_t& b : v) b = static_cast<uint16_t>(rng() | 1);  // never 0 (see release test)
  return v;
}

// Element (r, c) of a packed bf16 (T = uint16_t) or f32 (T = float) view, by the formulas
// in panels.h.
template <typename T>
T PackedAt(const TensorView& v, int64_t r, int64_t c) {
  const auto* p = static_cast<const T*>(v.data);
  if (v.type == DType::kF32) return p[(r / 16) * 16 * v.cols + c * 16 + r % 16];
  return p[(r / 16) * 16 * v.cols + (c / 2) * 32 + (r % 16) * 2 + c % 2];
}

// `packed` holds the n_rows x n_cols elements `rows` in the panel layout of its type
// (bf16 bits, or f32), 64-byte aligned.
template <typename T>
void ExpectPackedCopyOf(const TensorView& packed, const T* rows, int64_t n_rows, int64_t n_cols) {
  ASSERT_EQ(packed.type, sizeof(T) == 4 ? DType::kF32 : DType::kBF16);
  ASSERT_EQ(packed.layout, PanelLayoutOf(packed.type));
  ASSERT_EQ(packed.rows, n_rows);
  ASSERT_EQ(packed.cols, n_cols);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(packed.data) % 64, 0u);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t c = 0; c < n_cols; ++c) {
      ASSERT_EQ(PackedAt<T>(packed, r, c), rows[r * n_cols + c]) << "r=" << r << " c=" << c;
    }
  }
}

TEST(Bf16PanelsTest, FitOnlyRowMajorFloatsWithWholePanels) {
  uint16_t dummy = 0;
  EXPECT_TRUE(FloatPanelsFit(TensorView{DType::kBF16, &dummy, 32, 6}));
  EXPECT_FALSE(FloatPanelsFit(TensorView{DType::kBF16, &dummy, 24, 6}));  // half a panel
  EXPECT_FALSE(FloatPanelsFit(TensorView{DType::kBF16, &dummy, 32, 7}));  // odd columns
  EXPECT_FALSE(FloatPanelsFit(TensorView{DType::kBF16, &dummy, 0, 6}));
  EXPECT_FALSE(FloatPanelsFit(TensorView{DType::kF16, &dummy, 32, 6}));
  EXPECT_FALSE(FloatPanelsFit(TensorView{DType::kBF16, &dummy, 32, 6, Layout::kBf16Panels}));
  // f32: any number of columns.
  EXPECT_TRUE(FloatPanelsFit(TensorView{DType::kF32, &dummy, 32, 6}));
  EXPECT_TRUE(FloatPanelsFit(TensorView{DType::kF32, &dummy, 16, 7}));
  EXPECT_TRUE(PanelsFit(TensorView{DType::kF32, &dummy, 16, 7}));
  EXPECT_FALSE(FloatPanelsFit(TensorView{DType::kF32, &dummy, 24, 6}));
  EXPECT_FALSE(FloatPanelsFit(TensorView{DType::kF32, &dummy, 32, 6, Layout::kF32Panels}));
  EXPECT_EQ(PanelLayoutOf(DType::kF32), Layout::kF32Panels);
  EXPECT_EQ(PanelLayoutOf(DType::kBF16), Layout::kBf16Panels);
}

TEST(F32PanelsTest, PacksEveryElementWhereTheLayoutSays) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t cols : {1, 3, 10, 64, 129}) {
    for (int64_t rows : {16, 48, 160}) {
      std::vector<float> w(static_cast<size_t>(rows * cols));
      for (float& v : w) v = u(rng);
      std::vector<float> out(w.size());
      const int64_t panels = rows / kPanelRows;
      PackF32Panels(w.data(), cols, 0, panels / 2, out.data());
      PackF32Panels(w.data(), cols, panels / 2, panels, out.data());
      // (The test's vector is not 64-byte aligned; the layout is what is checked.)
      const TensorView v{DType::kF32, out.data(), rows, cols, Layout::kF32Panels};
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(PackedAt<float>(v, r, c), w[static_cast<size_t>(r * cols + c)])
              << "rows=" << rows << " cols=" << cols << " r=" << r << " c=" << c;
        }
      }
    }
  }
}

TEST(Bf16PanelsTest, PacksEveryElementWhereTheLayoutSays) {
  std::mt19937 rng(3);
  for (int64_t cols : {2, 10, 64, 130}) {
    for (int64_t rows : {16, 48, 160}) {
      const std::vector<uint16_t> bits = RandomBits(rng, static_cast<size_t>(rows * cols));
      std::vector<uint16_t> out(bits.size());
      // In two ranges of panels, as a pool would.
      const int64_t panels = rows / kPanelRows;
      PackBf16Panels(bits.data(), cols, 0, panels / 2, out.data());
      PackBf16Panels(bits.data(), cols, panels / 2, panels, out.data());
      // (The test's vector is not 64-byte aligned; the layout is what is checked.)
      const TensorView v{DType::kBF16, out.data(), rows, cols, Layout::kBf16Panels};
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(PackedAt<uint16_t>(v, r, c), bits[static_cast<size_t>(r * cols + c)])
              << "rows=" << rows << " cols=" << cols << " r=" << r << " c=" << c;
        }
      }
    }
  }
}

// A two-layer model: bf16 projections that fit (packed), one that does not (kept), an
// f32 one (kept), norms (kept), and an output tied to the token embedding.
struct TinyWeights {
  static constexpr int64_t kDim = 32;
  std::mt19937 rng{5};
  std::vector<uint16_t> embedding = RandomBits(rng, 64 * kDim);
  std::vector<uint16_t> wq = RandomBits(rng, kDim* kDim);
  std::vector<uint16_t> wk = RandomBits(rng, 8 * kDim);  // 8 rows: half a panel
  std::vector<float> wv = std::vector<float>(16 * kDim, 0.5f);
  std::vector<float> norm = std::vector<float>(kDim, 1.0f);
  ModelWeights weights;

  TinyWeights() {
    weights.token_embedding = TensorView{DType::kBF16, embedding.data(), 64, kDim};
    weights.output = weights.token_embedding;
    weights.output_norm = TensorView{DType::kF32, norm.data(), 1, kDim};
    for (int l = 0; l < 2; ++l) {
      LayerWeights layer;
      layer.attn_norm = weights.output_norm;
      layer.wq = TensorView{DType::kBF16, wq.data(), kDim, kDim};
      layer.wk = TensorView{DType::kBF16, wk.data(), 8, kDim};
      layer.wv = TensorView{DType::kF32, wv.data(), 16, kDim};
      weights.layers.push_back(layer);
    }
  }
};

TEST(Bf16PanelsTest, PacksProjectionsThatFitAndKeepsTheRest) {
  for (bool pack_tied_output : {false, true}) {
    SCOPED_TRACE(pack_tied_output ? "tied output packed" : "tied output kept");
    TinyWeights t;
    ModelWeights w = t.weights;
    EXPECT_FALSE(HasPanels(w));
    absl::StatusOr<common::HugePageMemory> memory = PackPanels(
        w, PanelPackOptions{.types = {.bf16 = true}, .pack_tied_output = pack_tied_output});
    ASSERT_TRUE(memory.ok()) << memory.status();
    EXPECT_TRUE(HasPanels(w));
    // The token embedding is looked up by row: the original, row-major.
    EXPECT_EQ(w.token_embedding.data, t.embedding.data());
    EXPECT_EQ(w.token_embedding.layout, Layout::kRows);
    if (pack_tied_output) {
      ExpectPackedCopyOf(w.output, t.embedding.data(), 64, TinyWeights::kDim);
    } else {
      EXPECT_EQ(w.output.data, t.embedding.data());
      EXPECT_EQ(w.output.layout, Layout::kRows);
    }
    for (const LayerWeights& layer : w.layers) {
      ExpectPackedCopyOf(layer.wq, t.wq.data(), TinyWeights::kDim, TinyWeights::kDim);
      EXPECT_EQ(layer.wk.data, t.wk.data());
      EXPECT_EQ(layer.wk.layout, Layout::kRows);
      EXPECT_EQ(layer.wv.data, t.wv.data());
      EXPECT_EQ(layer.attn_norm.data, t.norm.data());
    }
    // Each layer has its own copy, inside the returned region.
    EXPECT_NE(w.layers[0].wq.data, w.layers[1].wq.data);
    for (const TensorView* v : {&w.layers[0].wq, &w.layers[1].wq}) {
      const auto* p = static_cast<const uint8_t*>(v->data);
      EXPECT_GE(p, memory->data());
      EXPECT_LE(p + v->rows * v->cols * 2, memory->data() + memory->size());
    }
  }
}

TEST(Bf16PanelsTest, NothingToPackGivesAnEmptyRegion) {
  std::vector<float> f32(32 * 32, 1.0f);
  ModelWeights w;
  w.token_embedding = TensorView{DType::kF32, f32.data(), 32, 32};
  w.output = w.token_embedding;
  absl::StatusOr<common::HugePageMemory> memory =
      PackPanels(w, PanelPackOptions{.types = {.bf16 = true, .q4_0 = true}});
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ(memory->data(), nullptr);
  EXPECT_FALSE(HasPanels(w));
}

// release_originals gives the pages of the row-major bytes back: in anonymous memory
// they read as zeros afterwards (what shows the madvise happened), the packed copy is
// intact, and bytes outside the matrix's whole pages (a neighbour) are untouched.
TEST(Bf16PanelsTest, ReleasingOriginalsDropsOnlyTheirWholePages) {
  constexpr size_t kPage = 4096;
  constexpr int64_t kRows = 64, kCols = 128;  // 16 KiB: four pages
  const size_t bytes = 6 * kPage;
  void* region = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(region, MAP_FAILED);
  auto* base = static_cast<uint8_t*>(region);
  // The matrix starts 100 bytes into the second page; a neighbour lies before it.
  std::mt19937 rng(9);
  const std::vector<uint16_t> bits = RandomBits(rng, kRows * kCols);
  uint8_t* matrix = base + kPage + 100;
  std::memcpy(matrix, bits.data(), bits.size() * 2);
  std::memset(base, 0xab, kPage + 100);  // the neighbour
  ModelWeights w;
  std::vector<float> embedding(16 * 16, 1.0f);
  w.token_embedding = TensorView{DType::kF32, embedding.data(), 16, 16};
  w.output = w.token_embedding;
  LayerWeights layer;
  layer.wq = TensorView{DType::kBF16, matrix, kRows, kCols};
  w.layers.push_back(layer);
  absl::StatusOr<common::HugePageMemory> memory =
      PackPanels(w, PanelPackOptions{.types = {.bf16 = true}, .release_originals = true});
  ASSERT_TRUE(memory.ok());
  ExpectPackedCopyOf(w.layers[0].wq, bits.data(), kRows, kCols);
  for (size_t i = 0; i < kPage + 100; ++i) ASSERT_EQ(base[i], 0xab) << i;
  // The matrix's first partial page keeps its bytes; its whole pages read as zero.
  EXPECT_EQ(std::memcmp(matrix, bits.data(), kPage - 100), 0);
  for (size_t i = 2 * kPage; i < 5 * kPage; ++i) ASSERT_EQ(base[i], 0) << i;
  munmap(region, bytes);
}

// Bytes and elements per block of the quantized types with a panel layout.
int64_t BlockBytes(DType type) { return DTypeBytes(type, DTypeBlockElems(type)); }

// Byte i of row r's block b (row-major ggml bytes) in a packed view, by the layouts in
// panels.h: the lone f16 (q4_0, q8_0: bytes 0-1; q6_K: 208-209) first, 16 rows' worth,
// then the remaining 4-byte words as 64-byte lines (q6_K's scale words with bytes 1 and 2
// swapped).
uint8_t QuantPackedByte(const TensorView& v, int64_t r, int64_t b, int i) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  const int64_t blocks = v.cols / DTypeBlockElems(v.type);
  const uint8_t* block = p + ((r / 16) * blocks + b) * 16 * BlockBytes(v.type);
  const int half = v.type == DType::kQ6_K ? 208 : v.type == DType::kQ4_K ? -1 : 0;
  if (half >= 0 && i >= half && i < half + 2) return block[2 * (r % 16) + i - half];
  const int k = half == 0 ? i - 2 : i;  // byte k of the words
  int in_word = k % 4;
  if (v.type == DType::kQ6_K && k / 4 >= 48 && (in_word == 1 || in_word == 2)) {
    in_word = 3 - in_word;
  }
  return block[(half >= 0 ? 32 : 0) + 64 * (k / 4) + 4 * (r % 16) + in_word];
}

void ExpectQuantPackedCopyOf(const TensorView& packed, DType type, const uint8_t* rows,
                             int64_t n_rows, int64_t n_cols) {
  ASSERT_EQ(packed.layout, PanelLayoutOf(type));
  ASSERT_EQ(packed.type, type);
  ASSERT_EQ(packed.rows, n_rows);
  ASSERT_EQ(packed.cols, n_cols);
  const int64_t blocks = n_cols / DTypeBlockElems(type);
  const int64_t bytes = BlockBytes(type);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      for (int i = 0; i < bytes; ++i) {
        ASSERT_EQ(QuantPackedByte(packed, r, b, i), rows[(r * blocks + b) * bytes + i])
            << "r=" << r << " b=" << b << " i=" << i;
      }
    }
  }
}

std::vector<uint8_t> RandomBytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(QuantPanelsTest, FitOnlyRowMajorQuantizedWithWholePanels) {
  uint8_t dummy = 0;
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    SCOPED_TRACE(DTypeName(type));
    const int64_t cols = 2 * DTypeBlockElems(type);
    EXPECT_TRUE(QuantPanelsFit(TensorView{type, &dummy, 32, cols}));
    EXPECT_TRUE(PanelsFit(TensorView{type, &dummy, 32, cols}));
    EXPECT_FALSE(QuantPanelsFit(TensorView{type, &dummy, 24, cols}));  // half a panel
    EXPECT_FALSE(QuantPanelsFit(TensorView{type, &dummy, 0, cols}));
    EXPECT_FALSE(QuantPanelsFit(TensorView{type, &dummy, 32, cols, PanelLayoutOf(type)}));
    EXPECT_FALSE(FloatPanelsFit(TensorView{type, &dummy, 32, cols}));
  }
  EXPECT_FALSE(QuantPanelsFit(TensorView{DType::kQ4_K, &dummy, 32, 64}));  // part of a block
  EXPECT_FALSE(QuantPanelsFit(TensorView{DType::kBF16, &dummy, 32, 64}));
  EXPECT_FALSE(QuantPanelsFit(TensorView{DType::kF32, &dummy, 32, 64}));
  EXPECT_FALSE(PanelsFit(TensorView{DType::kF16, &dummy, 32, 64}));
  EXPECT_EQ(PanelLayoutOf(DType::kF16), Layout::kRows);
}

TEST(QuantPanelsTest, PacksEveryByteWhereTheLayoutSays) {
  std::mt19937 rng(4);
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    for (int64_t blocks : {1, 3, 8}) {
      for (int64_t rows : {16, 48, 160}) {
        const int64_t cols = blocks * DTypeBlockElems(type);
        const std::vector<uint8_t> bytes =
            RandomBytes(rng, static_cast<size_t>(rows * blocks * BlockBytes(type)));
        std::vector<uint8_t> out(bytes.size());
        const int64_t panels = rows / kPanelRows;
        PackQuantPanels(type, bytes.data(), cols, 0, panels / 2, out.data());
        PackQuantPanels(type, bytes.data(), cols, panels / 2, panels, out.data());
        SCOPED_TRACE(testing::Message() << DTypeName(type) << " rows=" << rows << " cols=" << cols);
        ExpectQuantPackedCopyOf(TensorView{type, out.data(), rows, cols, PanelLayoutOf(type)}, type,
                                bytes.data(), rows, cols);
      }
    }
  }
}

// PackMatrixPanels splits a matrix by panels between threads: the same bytes whatever
// their number, more threads than panels included, for every type with a panel layout.
TEST(PanelsTest, PacksTheSameBytesOnAnyNumberOfThreads) {
  std::mt19937 rng(5);
  for (DType type :
       {DType::kF32, DType::kBF16, DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const int64_t rows = 7 * kPanelRows;
    const int64_t cols = 2 * DTypeBlockElems(type) * (IsQuantized(type) ? 1 : 6);
    const std::vector<uint8_t> bytes =
        RandomBytes(rng, DTypeBytes(type, static_cast<size_t>(rows * cols)));
    const TensorView w{type, bytes.data(), rows, cols};
    ASSERT_TRUE(PanelsFit(w)) << DTypeName(type);
    std::vector<uint8_t> one(bytes.size());
    EXPECT_EQ(PackMatrixPanels(w, one.data(), 1), PanelLayoutOf(type));
    EXPECT_NE(one, bytes) << DTypeName(type);  // (a packed copy differs from the rows)
    for (int threads : {2, 3, 7, 8, 64}) {
      std::vector<uint8_t> out(bytes.size(), 0);
      EXPECT_EQ(PackMatrixPanels(w, out.data(), threads), PanelLayoutOf(type));
      EXPECT_EQ(out, one) << DTypeName(type) << " threads=" << threads;
    }
  }
}

// PackPanels packs the types it is asked for, each in its layout, and says which.
TEST(QuantPanelsTest, PacksOnlyTheTypesAskedFor) {
  std::mt19937 rng(6);
  constexpr int64_t kDim = 64;
  constexpr int64_t kWide = 256;  // the k-quants' rows: one block
  const std::vector<uint8_t> q4 = RandomBytes(rng, kDim * kDim / 32 * 18);
  const std::vector<uint8_t> q8 = RandomBytes(rng, kDim * kDim / 32 * 34);
  const std::vector<uint8_t> q4k = RandomBytes(rng, kDim * 144);
  const std::vector<uint8_t> q6k = RandomBytes(rng, kDim * 210);
  const std::vector<uint16_t> bf16 = RandomBits(rng, kDim * kDim);
  std::vector<float> f32(kDim * kDim);
  for (float& v : f32) v = static_cast<float>(rng() % 1000);
  std::vector<float> embedding(16 * kDim, 1.0f);
  ModelWeights base;
  base.token_embedding = TensorView{DType::kF32, embedding.data(), 16, kDim};
  base.output = base.token_embedding;
  LayerWeights layer;
  layer.wq = TensorView{DType::kQ4_0, q4.data(), kDim, kDim};
  layer.wk = TensorView{DType::kBF16, bf16.data(), kDim, kDim};
  layer.wv = TensorView{DType::kQ8_0, q8.data(), kDim, kDim};
  layer.wo = TensorView{DType::kQ4_K, q4k.data(), kDim, kWide};
  layer.w_down = TensorView{DType::kQ6_K, q6k.data(), kDim, kWide};
  layer.w_gate = TensorView{DType::kF32, f32.data(), kDim, kDim};
  base.layers.push_back(layer);
  const DType kTypes[] = {DType::kF32,  DType::kBF16, DType::kQ4_0,
                          DType::kQ8_0, DType::kQ4_K, DType::kQ6_K};
  std::vector<PanelTypes> cases;
  for (DType type : kTypes) {
    cases.emplace_back();
    cases.back().set(type, true);
  }
  cases.push_back(PanelTypes{
      .f32 = true, .bf16 = true, .q4_0 = true, .q8_0 = true, .q4_k = true, .q6_k = true});
  for (const PanelTypes& types : cases) {
    ModelWeights w = base;
    absl::StatusOr<common::HugePageMemory> memory = PackPanels(w, PanelPackOptions{.types = types});
    ASSERT_TRUE(memory.ok()) << memory.status();
    const PanelTypes got = PanelTypesOf(w);
    const LayerWeights& packed = w.layers[0];
    for (DType type : kTypes) {
      SCOPED_TRACE(testing::Message() << DTypeName(type) << " asked " << types.has(type));
      EXPECT_EQ(got.has(type), types.has(type));
      for (const auto& [view, original] :
           {std::pair{&packed.wq, &layer.wq}, std::pair{&packed.wk, &layer.wk},
            std::pair{&packed.wv, &layer.wv}, std::pair{&packed.wo, &layer.wo},
            std::pair{&packed.w_down, &layer.w_down}, std::pair{&packed.w_gate, &layer.w_gate}}) {
        if (view->type != type) continue;
        if (!types.has(type)) {
          EXPECT_EQ(view->data, original->data);
          EXPECT_EQ(view->layout, Layout::kRows);
        } else if (type == DType::kBF16) {
          ExpectPackedCopyOf(*view, static_cast<const uint16_t*>(original->data), kDim, kDim);
        } else if (type == DType::kF32) {
          ExpectPackedCopyOf(*view, static_cast<const float*>(original->data), kDim, kDim);
        } else {
          ExpectQuantPackedCopyOf(*view, type, static_cast<const uint8_t*>(original->data),
                                  original->rows, original->cols);
          EXPECT_EQ(reinterpret_cast<uintptr_t>(view->data) % 64, 0u);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::model
