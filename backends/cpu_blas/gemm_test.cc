#include "backends/cpu_blas/gemm.h"

#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "backends/cpu_blas/packed_weights.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "backends/cpu_blas/thread_pool.h"
#include "backends/testing/random_model.h"
#include "gtest/gtest.h"
#include "model/panels.h"

namespace kvserve::backends::cpu_blas {
namespace {

using model::DType;

// kRows x kCols random rows of `dtype`, encoded.
std::vector<uint8_t> RandomMatrix(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint8_t> bytes;
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = u(rng);
    const std::vector<uint8_t> enc = testing::EncodeRow(row, dtype);
    bytes.insert(bytes.end(), enc.begin(), enc.end());
  }
  return bytes;
}

// How a Run is cut into slices (the thread count; GemmOptions::quant_min_task_bytes for
// the quantized types) decides only who computes which output rows, never their values:
// every slicing, with or without panels, gives the bytes one thread computing every row
// gives. The one thread keeps q6_K panels packed (GemmOptions::quant_unpack false), the
// slices unpack them per slab where the rows are many (70: more than every level's
// threshold), so the unpacked path is held to the packed one as well.
TEST(GemmTest, SlicingDoesNotChangeResults) {
  constexpr int64_t kRows = 1040;  // not a multiple of the 32-row panel pairs
  constexpr int64_t kCols = 512;
  const KernelSet& kernels = KernelsFor(BestIsa());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ5_0,
                      DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const std::vector<uint8_t> bytes = RandomMatrix(dtype, kRows, kCols, rng);
    const model::TensorView rows_view{dtype, bytes.data(), kRows, kCols};
    std::unique_ptr<PanelMatrix> panels;
    GemmOptions options;
    if (PanelsReadable(kernels, options).has(dtype) && model::PanelsFit(rows_view)) {
      panels = std::make_unique<PanelMatrix>(rows_view);
    }
    for (const model::TensorView* w : {&rows_view, panels ? &panels->view() : nullptr}) {
      if (w == nullptr) continue;
      for (int n : {1, 3, 16, 70}) {
        SCOPED_TRACE(::testing::Message() << model::DTypeName(dtype) << " n=" << n
                                          << (w == &rows_view ? " rows" : " panels"));
        std::vector<float> x(static_cast<size_t>(n * kCols));
        for (float& v : x) v = u(rng);
        ThreadPool one(1);
        GemmOptions packed = options;
        packed.quant_unpack = false;
        Gemm alone(&one, &kernels, packed);
        std::vector<float> want(static_cast<size_t>(n * kRows));
        alone.Run(*w, x.data(), n, want.data());
        for (int threads : {2, 3}) {
          ThreadPool pool(threads);
          // 0: about 8 slices per thread; 64 KiB: slices in between; 1 << 40: one per
          // thread.
          for (int64_t min_task_bytes : {int64_t{0}, int64_t{64} << 10, int64_t{1} << 40}) {
            GemmOptions sliced = options;
            sliced.quant_min_task_bytes = min_task_bytes;
            Gemm gemm(&pool, &kernels, sliced);
            std::vector<float> got(want.size(), -7.0f);
            gemm.Run(*w, x.data(), n, got.data());
            ASSERT_EQ(got, want) << "threads=" << threads << " min_task_bytes=" << min_task_bytes;
          }
        }
      }
    }
  }
}

// RunGroups (a mixture of experts' products over the rows routed to each expert) gives
// every row bit for bit what a Run of its product alone gives, with and without batch
// invariance, panels or not, on one to three threads: one product, products of no rows,
// row ranges of uneven sizes (1, 2, 7 and 20 rows, so some go to sgemm without batch
// invariance), matrices whose rows split unevenly into slices.
TEST(GemmTest, RunGroupsEqualsOneRunPerProduct) {
  // As CpuBlasBackend does: OpenBLAS (the sgemm path of batch_invariant = false below)
  // runs each call on the calling pool thread, not on threads of its own.
  SetOpenBlasSingleThreaded();
  constexpr int64_t kCols = 512;
  const KernelSet& kernels = KernelsFor(BestIsa());
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // {rows of each expert's matrix, the row count of each expert's range}.
  const std::vector<std::pair<int64_t, std::vector<int>>> cases = {
      {96, {1}}, {96, {0, 3, 0}}, {208, {1, 2, 7, 20, 0, 1}}, {1040, {2, 1}}};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ5_0,
                      DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (const auto& [rows, counts] : cases) {
      const int experts = static_cast<int>(counts.size());
      std::vector<std::vector<uint8_t>> bytes;
      std::vector<model::TensorView> views;
      std::vector<std::unique_ptr<PanelMatrix>> panels;
      for (int e = 0; e < experts; ++e) bytes.push_back(RandomMatrix(dtype, rows, kCols, rng));
      for (int e = 0; e < experts; ++e) {
        views.push_back(
            model::TensorView{dtype, bytes[static_cast<size_t>(e)].data(), rows, kCols});
        if (PanelsReadable(kernels, GemmOptions{}).has(dtype) && model::PanelsFit(views.back())) {
          panels.push_back(std::make_unique<PanelMatrix>(views.back()));
        }
      }
      int n = 0;
      for (int c : counts) n += c;
      std::vector<float> x(static_cast<size_t>(n * kCols));
      for (float& v : x) v = u(rng);
      for (bool use_panels : {false, true}) {
        if (use_panels && panels.size() != views.size()) continue;
        for (bool invariant : {true, false}) {
          SCOPED_TRACE(::testing::Message()
                       << model::DTypeName(dtype) << " rows=" << rows << " experts=" << experts
                       << (use_panels ? " panels" : "") << (invariant ? " invariant" : ""));
          GemmOptions options;
          options.batch_invariant = invariant;
          options.sgemm_min_rows = options.quant_sgemm_min_rows = 16;
          for (int threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            // Two products per range (gate and up): expert e's matrix, then the next one's.
            // The oracle runs each range's pair as one Run, as RunGroups does without batch
            // invariance (sgemm's rounding may depend on the slicing, which depends on the
            // products run together); with it, RunGroups runs everything at once.
            std::vector<Gemm::RowsProduct> products;
            std::vector<float> want(static_cast<size_t>(2 * n * rows));
            std::vector<float> got(want.size(), -7.0f);
            Gemm one_by_one(&pool, &kernels, options);
            int begin = 0;
            for (int e = 0; e < experts; ++e) {
              const int count = counts[static_cast<size_t>(e)];
              Gemm::Product pair[2];
              for (int j = 0; j < 2; ++j) {
                const size_t m = static_cast<size_t>((e + j) % experts);
                const model::TensorView* w = use_panels ? &panels[m]->view() : &views[m];
                const int64_t at = (j * n + begin) * rows;
                products.push_back(Gemm::RowsProduct{w, got.data() + at, begin, count});
                pair[j] = Gemm::Product{w, &want[static_cast<size_t>(at)]};
              }
              if (count > 0) one_by_one.Run({pair[0], pair[1]}, x.data() + begin * kCols, count);
              begin += count;
            }
            Gemm gemm(&pool, &kernels, options);
            gemm.RunGroups(products, x.data(), n);
            ASSERT_EQ(got, want) << "threads=" << threads;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::backends::cpu_blas
