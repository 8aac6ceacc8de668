#include "backends/cpu_blas/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <span>

#include "backends/kernels/matvec.h"

namespace kvserve::backends::cpu_blas {
namespace {

// Below this many multiply-adds a projection runs on the calling thread: waking the pool
// would cost more than it saves (tiny models such as stories260K).
constexpr int64_t kMinParallelMacs = 64 * 1024;

// Output rows per streaming task: enough tasks to balance, each a multiple of 4 rows
// (the kernels' register blocking) and at least 16.
int64_t StreamingChunkRows(int64_t rows, int threads) {
  int64_t chunk = rows / (static_cast<int64_t>(threads) * 8);
  chunk = std::max<int64_t>(16, (chunk + 3) / 4 * 4);
  return chunk;
}

}  // namespace

void SetOpenBlasSingleThreaded() { openblas_set_num_threads(1); }

Gemm::Gemm(ThreadPool* pool, const KernelSet* kernels, const GemmOptions& options)
    : pool_(pool), kernels_(kernels), options_(options), tiles_(pool->size()) {}

void Gemm::Run(const model::TensorView& w, const float* x, int n, float* y) {
  if (n >= options_.sgemm_min_rows && w.type != model::DType::kQ8_0) {
    RunSgemm(w, x, n, y);
  } else {
    RunStreaming(w, x, n, y);
  }
}

void Gemm::RunStreaming(const model::TensorView& w, const float* x, int n, float* y) {
  const int64_t rows = w.rows;
  const int64_t cols = w.cols;
  const int64_t macs = rows * cols * n;
  const int64_t chunk =
      macs < kMinParallelMacs ? rows : StreamingChunkRows(rows, pool_->size());
  const int64_t n_tasks = (rows + chunk - 1) / chunk;
  const KernelSet& k = *kernels_;
  pool_->Run(n_tasks, [&](int64_t task, int /*thread*/) {
    const int64_t r0 = task * chunk;
    const int64_t r1 = std::min(rows, r0 + chunk);
    switch (w.type) {
      case model::DType::kF32:
        k.matmul_f32(static_cast<const float*>(w.data), cols, r0, r1, x, cols, n, y, rows);
        break;
      case model::DType::kF16:
        k.matmul_f16(static_cast<const uint16_t*>(w.data), cols, r0, r1, x, cols, n, y, rows);
        break;
      case model::DType::kBF16:
        k.matmul_bf16(static_cast<const uint16_t*>(w.data), cols, r0, r1, x, cols, n, y, rows);
        break;
      case model::DType::kQ8_0:
        for (int64_t r = r0; r < r1; ++r) {
          for (int i = 0; i < n; ++i) {
            y[i * rows + r] = kernels::DotRow(
                w, r, std::span<const float>(x + i * cols, static_cast<size_t>(cols)));
          }
        }
        break;
    }
  });
}

void Gemm::RunSgemm(const model::TensorView& w, const float* x, int n, float* y) {
  const int64_t rows = w.rows;
  const int64_t cols = w.cols;
  // Tile rows: a multiple of 16, at least 16, about kTileBytes of f32.
  int64_t tile_rows = kTileBytes / (cols * static_cast<int64_t>(sizeof(float)));
  tile_rows = std::max<int64_t>(16, tile_rows / 16 * 16);
  // Keep every thread busy on small matrices.
  const int64_t per_thread = (rows + pool_->size() - 1) / pool_->size();
  tile_rows = std::min(tile_rows, std::max<int64_t>(16, (per_thread + 15) / 16 * 16));
  const int64_t n_tasks = (rows + tile_rows - 1) / tile_rows;
  const KernelSet& k = *kernels_;
  pool_->Run(n_tasks, [&](int64_t task, int thread) {
    const int64_t r0 = task * tile_rows;
    const int64_t nr = std::min(rows, r0 + tile_rows) - r0;
    const float* tile;  // [nr, cols]
    if (w.type == model::DType::kF32) {
      tile = static_cast<const float*>(w.data) + r0 * cols;
    } else {
      std::vector<float>& scratch = tiles_[static_cast<size_t>(thread)];
      if (scratch.size() < static_cast<size_t>(nr * cols)) scratch.resize(nr * cols);
      const uint16_t* src = static_cast<const uint16_t*>(w.data) + r0 * cols;
      if (w.type == model::DType::kF16) {
        k.f16_to_f32(src, scratch.data(), nr * cols);
      } else {
        k.bf16_to_f32(src, scratch.data(), nr * cols);
      }
      tile = scratch.data();
    }
    // Y[:, r0:r0+nr] = X[n, cols] · tile[nr, cols]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, static_cast<int>(nr),
                static_cast<int>(cols), 1.0f, x, static_cast<int>(cols), tile,
                static_cast<int>(cols), 0.0f, y + r0, static_cast<int>(rows));
  });
}

}  // namespace kvserve::backends::cpu_blas
