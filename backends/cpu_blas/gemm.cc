#include "backends/cpu_blas/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <span>

#include "backends/kernels/matvec.h"

namespace kvserve::backends::cpu_blas {
namespace {

// Below this many multiply-adds a Run stays on the calling thread: waking the pool would
// cost more than it saves (tiny models such as stories260K).
constexpr int64_t kMinParallelMacs = 64 * 1024;

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace

void SetOpenBlasSingleThreaded() { openblas_set_num_threads(1); }

Gemm::Gemm(ThreadPool* pool, const KernelSet* kernels, const GemmOptions& options)
    : pool_(pool), kernels_(kernels), options_(options), tiles_(pool->size()) {}

void Gemm::Run(const model::TensorView& w, const float* x, int n, float* y) {
  Run({Product{&w, y}}, x, n);
}

void Gemm::Run(std::initializer_list<Product> products, const float* x, int n) {
  int64_t total_rows = 0;
  int64_t macs = 0;
  for (const Product& p : products) {
    total_rows += p.w->rows;
    macs += p.w->rows * p.w->cols * n;
  }
  const int threads = pool_->size();
  const bool sgemm = n >= options_.sgemm_min_rows;
  // Rows per slice. Streaming: enough slices to balance (about 8 per thread), a multiple
  // of 4 rows (the kernels' register blocking), at least 16. sgemm: tiles of about
  // tile_bytes of f32, a multiple of 16 rows, no more than a thread's share.
  int64_t chunk;
  if (macs < kMinParallelMacs) {
    chunk = total_rows;
  } else if (!sgemm) {
    chunk = std::max<int64_t>(16, RoundUp(total_rows / (threads * 8), 4));
  } else {
    const int64_t cols = products.begin()->w->cols;
    chunk = std::max<int64_t>(16, options_.tile_bytes / (cols * 4) / 16 * 16);
    chunk =
        std::min(chunk, std::max<int64_t>(16, RoundUp((total_rows + threads - 1) / threads, 16)));
  }
  tasks_.clear();
  for (const Product& p : products) {
    for (int64_t r0 = 0; r0 < p.w->rows; r0 += chunk) {
      tasks_.push_back(Task{p.w, p.y, r0, std::min(p.w->rows, r0 + chunk)});
    }
  }
  pool_->Run(static_cast<int64_t>(tasks_.size()), [&](int64_t t, int thread) {
    const Task& task = tasks_[static_cast<size_t>(t)];
    if (sgemm && task.w->type != model::DType::kQ8_0) {
      RunSgemm(task, x, n, thread);
    } else {
      RunStreaming(task, x, n);
    }
  });
}

void Gemm::RunStreaming(const Task& task, const float* x, int n) {
  const model::TensorView& w = *task.w;
  const int64_t rows = w.rows;
  const int64_t cols = w.cols;
  const KernelSet& k = *kernels_;
  switch (w.type) {
    case model::DType::kF32:
      k.matmul_f32(static_cast<const float*>(w.data), cols, task.r0, task.r1, x, cols, n, task.y,
                   rows);
      break;
    case model::DType::kF16:
      k.matmul_f16(static_cast<const uint16_t*>(w.data), cols, task.r0, task.r1, x, cols, n, task.y,
                   rows);
      break;
    case model::DType::kBF16:
      k.matmul_bf16(static_cast<const uint16_t*>(w.data), cols, task.r0, task.r1, x, cols, n,
                    task.y, rows);
      break;
    case model::DType::kQ8_0:
      for (int64_t r = task.r0; r < task.r1; ++r) {
        for (int i = 0; i < n; ++i) {
          task.y[i * rows + r] = kernels::DotRow(
              w, r, std::span<const float>(x + i * cols, static_cast<size_t>(cols)));
        }
      }
      break;
  }
}

void Gemm::RunSgemm(const Task& task, const float* x, int n, int thread) {
  const model::TensorView& w = *task.w;
  const int64_t rows = w.rows;
  const int64_t cols = w.cols;
  const int64_t nr = task.r1 - task.r0;
  const float* tile;  // [nr, cols]
  if (w.type == model::DType::kF32) {
    tile = static_cast<const float*>(w.data) + task.r0 * cols;
  } else {
    std::vector<float>& scratch = tiles_[static_cast<size_t>(thread)];
    if (scratch.size() < static_cast<size_t>(nr * cols)) scratch.resize(nr * cols);
    const uint16_t* src = static_cast<const uint16_t*>(w.data) + task.r0 * cols;
    if (w.type == model::DType::kF16) {
      kernels_->f16_to_f32(src, scratch.data(), nr * cols);
    } else {
      kernels_->bf16_to_f32(src, scratch.data(), nr * cols);
    }
    tile = scratch.data();
  }
  // Y[:, r0:r1] = X[n, cols] · tile[nr, cols]^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, static_cast<int>(nr),
              static_cast<int>(cols), 1.0f, x, static_cast<int>(cols), tile, static_cast<int>(cols),
              0.0f, task.y + task.r0, static_cast<int>(rows));
}

}  // namespace kvserve::backends::cpu_blas
