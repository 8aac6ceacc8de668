#include "backends/cpu_blas/gemm.h"

#include <cstdint>
#include <memory>
#include <random>
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

// How a Run is cut into slices (the thread count; GemmOptions::quant_min_task_bytes for
// the quantized types) decides only who computes which output rows, never their values:
// every slicing, with or without panels, gives the bytes one thread computing every row
// gives.
TEST(GemmTest, SlicingDoesNotChangeResults) {
  constexpr int64_t kRows = 1040;  // not a multiple of the 32-row panel pairs
  constexpr int64_t kCols = 512;
  const KernelSet& kernels = KernelsFor(BestIsa());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (DType dtype :
       {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    std::vector<uint8_t> bytes;
    std::vector<float> row(kCols);
    for (int64_t r = 0; r < kRows; ++r) {
      for (float& v : row) v = u(rng);
      const std::vector<uint8_t> enc = testing::EncodeRow(row, dtype);
      bytes.insert(bytes.end(), enc.begin(), enc.end());
    }
    const model::TensorView rows_view{dtype, bytes.data(), kRows, kCols};
    std::unique_ptr<PanelMatrix> panels;
    GemmOptions options;
    if (PanelsReadable(kernels, options).has(dtype) && model::PanelsFit(rows_view)) {
      panels = std::make_unique<PanelMatrix>(rows_view);
    }
    for (const model::TensorView* w : {&rows_view, panels ? &panels->view() : nullptr}) {
      if (w == nullptr) continue;
      for (int n : {1, 3, 16}) {
        SCOPED_TRACE(::testing::Message() << model::DTypeName(dtype) << " n=" << n
                                          << (w == &rows_view ? " rows" : " panels"));
        std::vector<float> x(static_cast<size_t>(n * kCols));
        for (float& v : x) v = u(rng);
        ThreadPool one(1);
        Gemm alone(&one, &kernels, options);
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

}  // namespace
}  // namespace kvserve::backends::cpu_blas
