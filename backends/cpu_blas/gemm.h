// Projections Y = X · W^T of stacked activation rows against a weight matrix of any
// model::DType, split across a ThreadPool.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_GEMM_H_
#define KVSERVE_BACKENDS_CPU_BLAS_GEMM_H_

#include <cstdint>
#include <vector>

#include "backends/cpu_blas/simd_kernels.h"
#include "backends/cpu_blas/thread_pool.h"
#include "model/tensor.h"

namespace kvserve::backends::cpu_blas {

struct GemmOptions {
  // Products with at least this many activation rows run as OpenBLAS sgemm over weight
  // tiles (16-bit tiles are first converted to f32 in a per-thread scratch of about
  // kTileBytes); fewer rows use the streaming SIMD kernels, which read each weight once
  // for all rows. The crossover was measured with bench/kernels_bench.cc. Default 8.
  int sgemm_min_rows = 8;
};

// Runs projections for one backend. OpenBLAS is called only from inside pool tasks, each
// call single-threaded on its own weight tile, so OpenBLAS threads never compete with
// the pool's (see SetOpenBlasSingleThreaded).
//
// Threading: like ThreadPool::Run, one caller thread at a time.
class Gemm {
 public:
  // Target size of one f32 weight tile: fits the L2 cache next to the activations.
  static constexpr int64_t kTileBytes = 256 * 1024;

  // `pool` and `kernels` must outlive the Gemm.
  Gemm(ThreadPool* pool, const KernelSet* kernels, const GemmOptions& options);

  // y[i, r] = sum_c W[r, c] * x[i, c]    for i in [0, n), r in [0, w.rows)
  // x: [n, w.cols] row-major; y: [n, w.rows] row-major. Precondition: n >= 1, y does not
  // alias x, and w.data holds w.rows * w.row_bytes() bytes (any model::DType; q8_0 runs
  // through the shared scalar kernel, split across the pool).
  void Run(const model::TensorView& w, const float* x, int n, float* y);

 private:
  void RunStreaming(const model::TensorView& w, const float* x, int n, float* y);
  void RunSgemm(const model::TensorView& w, const float* x, int n, float* y);

  ThreadPool* pool_;
  const KernelSet* kernels_;
  GemmOptions options_;
  std::vector<std::vector<float>> tiles_;  // per pool thread: [tile_rows, cols] f32
};

// Sets OpenBLAS to run every call on the calling thread only. OpenBLAS's thread count is
// process-wide; cpu_blas parallelises around OpenBLAS with its own pool instead.
void SetOpenBlasSingleThreaded();

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_GEMM_H_
