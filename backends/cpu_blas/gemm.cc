#include "backends/cpu_blas/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <span>

#include "backends/cpu_blas/q8_activations.h"
#include "model/panels.h"
#include "model/quant.h"

namespace kvserve::backends::cpu_blas {
namespace {

// Below this many multiply-adds a Run stays on the calling thread: waking the pool would
// cost more than it saves (tiny models such as stories260K).
constexpr int64_t kMinParallelMacs = 64 * 1024;

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

const uint8_t* Bytes(const model::TensorView& w) { return static_cast<const uint8_t*>(w.data); }

}  // namespace

void SetOpenBlasSingleThreaded() { openblas_set_num_threads(1); }

bool UsesBf16Dot(const KernelSet& kernels, const GemmOptions& options) {
  return options.bf16_dot && kernels.matmul_bf16_dot != nullptr;
}

model::PanelTypes PanelsReadable(const KernelSet& kernels, const GemmOptions& options) {
  return model::PanelTypes{
      .f32 = kernels.matmul_f32_panels != nullptr,
      .bf16 = UsesBf16Dot(kernels, options) ? kernels.matmul_bf16_panels != nullptr
                                            : kernels.matmul_bf16_panels_exact != nullptr,
      .q4_0 = kernels.matmul_q4_0_panels != nullptr,
      .q8_0 = kernels.matmul_q8_0_panels != nullptr,
      .q4_k = kernels.matmul_q4_k_panels != nullptr,
      .q6_k = kernels.matmul_q6_k_panels != nullptr,
  };
}

model::PanelTypes PanelsWanted(const KernelSet& kernels, const GemmOptions& options) {
  const model::PanelTypes readable = PanelsReadable(kernels, options);
  return model::PanelTypes{.f32 = readable.f32 && options.f32_panels,
                           .bf16 = readable.bf16 && options.bf16_panels,
                           .q4_0 = readable.q4_0 && options.quant_panels,
                           .q8_0 = readable.q8_0 && options.quant_panels,
                           .q4_k = readable.q4_k && options.quant_panels,
                           .q6_k = readable.q6_k && options.quant_panels};
}

Gemm::Gemm(ThreadPool* pool, const KernelSet* kernels, const GemmOptions& options)
    : pool_(pool),
      kernels_(kernels),
      options_(options),
      tiles_(pool->size()),
      unpack_scratch_(pool->size()),
      bf16_panels_fma_(options.bf16_dot && options.bf16_panels &&
                       ResolveBf16PanelKernel(*kernels, options.bf16_panel_kernel) ==
                           Bf16PanelKernel::kFma) {}

void Gemm::Run(const model::TensorView& w, const float* x, int n, float* y) {
  Run({Product{&w, y}}, x, n);
}

void Gemm::Run(std::initializer_list<Product> products, const float* x, int n) {
  products_.clear();
  for (const Product& p : products) products_.push_back(RowsProduct{p.w, p.y, 0, n});
  RunProducts(products_, x, n);
}

void Gemm::RunGroups(std::span<const RowsProduct> products, const float* x, int n) {
  if (options_.batch_invariant) {
    products_.clear();
    for (const RowsProduct& p : products) {
      if (p.n > 0) products_.push_back(p);
    }
    if (!products_.empty()) RunProducts(products_, x, n);
    return;
  }
  const int64_t cols = products.empty() ? 0 : products.front().w->cols;
  for (size_t i = 0; i < products.size();) {
    size_t end = i + 1;
    while (end < products.size() && products[end].x_begin == products[i].x_begin &&
           products[end].n == products[i].n) {
      ++end;
    }
    if (products[i].n > 0) {
      range_.assign(products.begin() + static_cast<std::ptrdiff_t>(i),
                    products.begin() + static_cast<std::ptrdiff_t>(end));
      for (RowsProduct& p : range_) p.x_begin = 0;
      RunProducts(range_, x + products[i].x_begin * cols, products[i].n);
    }
    i = end;
  }
}

void Gemm::RunProducts(std::span<const RowsProduct> products, const float* x, int n) {
  int64_t total_rows = 0;
  int64_t total_bytes = 0;
  int64_t macs = 0;
  for (const RowsProduct& p : products) {
    total_rows += p.w->rows;
    total_bytes += p.w->rows * static_cast<int64_t>(p.w->row_bytes());
    macs += p.w->rows * p.w->cols * p.n;
  }
  const int threads = pool_->size();
  const bool quantized = model::IsQuantized(products.front().w->type);
  const int64_t cols = products.front().w->cols;
  bf16_dot_ = products.front().w->type == model::DType::kBF16 && UsesBf16Dot(*kernels_, options_);
  bool f32_panels = false;
  bool bf16_panels = false;
  quant_panels_ = false;
  for (const RowsProduct& p : products) {
    const bool panel = p.w->layout != model::Layout::kRows;
    f32_panels |= panel && p.w->type == model::DType::kF32;
    bf16_panels |= panel && p.w->type == model::DType::kBF16;
    quant_panels_ |= panel && model::IsQuantized(p.w->type);
    assert(!panel || PanelsReadable(*kernels_, options_).has(p.w->type));
  }
  // Batch invariance: the interleaved kernels for every row count (their sums do not
  // depend on it; the one-row kernels sum in another order).
  const int interleave_min_rows = options_.batch_invariant ? 1 : options_.quant_interleave_min_rows;
  interleaved_ = quantized && !quant_panels_ && n >= interleave_min_rows && cols % 256 == 0 &&
                 kernels_->matmul_q8_0_il != nullptr;
  const bool panels = f32_panels || bf16_panels || quant_panels_;
  const bool sgemm = !options_.batch_invariant && !interleaved_ && !bf16_dot_ && !panels &&
                     n >= (quantized ? options_.quant_sgemm_min_rows : options_.sgemm_min_rows);
  if (bf16_dot_) {
    RoundActivations(x, n, cols, bf16_panels && bf16_panels_fma_);
  } else if (!sgemm) {
    QuantizeActivations(products, x, n);
  }
  // The exact panel kernels (f32; bf16 without bf16_dot) read x as floats, padded.
  if (f32_panels || (bf16_panels && !bf16_dot_)) PadActivations(x, n, cols);
  // Rows per slice of a product over rows_n activation rows. Streaming: enough slices to
  // balance (about 8 per thread over all products; quantized weights: no smaller than
  // options_.quant_min_task_bytes / rows_n weight bytes), a multiple of the kernels'
  // register blocking (4 rows; the bf16 dot kernel's 6, so 12; the panel tiles' 2 or 4
  // panels of 16 rows, so 32: a slice's last panels go in pairs, then alone) of at least
  // 16 rows. (A multiple, so that a row's place in its tile, which decides its summation
  // order in the bf16 dot kernel, does not depend on the slicing: 16 rows of bf16 would
  // end in a 4-row tail.) sgemm: tiles of at most about tile_bytes of f32 (each sgemm call packs
  // all n activation rows again), as many as a multiple of the thread count and of equal size (a
  // multiple of 16 rows), so the threads finish together.
  const int64_t multiple = panels ? 2 * model::kPanelRows : bf16_dot_ ? 12 : 4;
  const int64_t row_bytes = std::max<int64_t>(1, total_bytes / total_rows);
  const int64_t per_thread = (total_rows + threads - 1) / threads;
  const int64_t tile_rows = std::max<int64_t>(16, options_.tile_bytes / (cols * 4));
  const int64_t tiles = RoundUp((total_rows + tile_rows - 1) / tile_rows, threads);
  auto chunk_rows = [&](int rows_n) -> int64_t {
    if (macs < kMinParallelMacs) return total_rows;
    if (sgemm) return std::max<int64_t>(16, RoundUp((total_rows + tiles - 1) / tiles, 16));
    const int64_t min_rows = quantized ? options_.quant_min_task_bytes / (rows_n * row_bytes) : 0;
    const int64_t chunk = std::min(std::max(total_rows / (threads * 8), min_rows), per_thread);
    return RoundUp(std::max<int64_t>(16, chunk), multiple);
  };
  tasks_.clear();
  for (const RowsProduct& p : products) {
    const int64_t chunk = chunk_rows(p.n);
    for (int64_t r0 = 0; r0 < p.w->rows; r0 += chunk) {
      tasks_.push_back(Task{p.w, p.y, r0, std::min(p.w->rows, r0 + chunk), p.x_begin, p.n});
    }
  }
  pool_->Run(static_cast<int64_t>(tasks_.size()), [&](int64_t t, int thread) {
    const Task& task = tasks_[static_cast<size_t>(t)];
    if (sgemm) {
      RunSgemm(task, x, thread);
    } else {
      RunStreaming(task, x, thread);
    }
  });
}

void Gemm::RunStreaming(const Task& task, const float* x, int thread) {
  const model::TensorView& w = *task.w;
  const int64_t rows = w.rows;
  const int64_t cols = w.cols;
  const int n = task.n;
  x += task.x_begin * cols;
  const KernelSet& k = *kernels_;
  switch (w.type) {
    case model::DType::kF32:
      if (w.layout == model::Layout::kF32Panels) {
        k.matmul_f32_panels(static_cast<const float*>(w.data), cols, task.r0, task.r1,
                            xf32_rows_ + task.x_begin * xf32_row_, xf32_row_, n, task.y, rows);
      } else {
        k.matmul_f32(static_cast<const float*>(w.data), cols, task.r0, task.r1, x, cols, n, task.y,
                     rows);
      }
      break;
    case model::DType::kF16:
      k.matmul_f16(static_cast<const uint16_t*>(w.data), cols, task.r0, task.r1, x, cols, n, task.y,
                   rows);
      break;
    case model::DType::kBF16:
      if (w.layout == model::Layout::kBf16Panels && !bf16_dot_) {
        k.matmul_bf16_panels_exact(static_cast<const uint16_t*>(w.data), cols, task.r0, task.r1,
                                   xf32_rows_ + task.x_begin * xf32_row_, xf32_row_, n, task.y,
                                   rows);
      } else if (w.layout == model::Layout::kBf16Panels && bf16_panels_fma_) {
        k.matmul_bf16_panels_fma(static_cast<const uint16_t*>(w.data), cols, task.r0, task.r1,
                                 xbf16f_.data() + task.x_begin * xbf16_row_, xbf16_row_, n, task.y,
                                 rows);
      } else if (w.layout == model::Layout::kBf16Panels) {
        k.matmul_bf16_panels(static_cast<const uint16_t*>(w.data), cols, task.r0, task.r1,
                             xbf16_.data() + task.x_begin * xbf16_row_, xbf16_row_, n, task.y,
                             rows);
      } else if (bf16_dot_) {
        k.matmul_bf16_dot(static_cast<const uint16_t*>(w.data), cols, task.r0, task.r1,
                          xbf16_.data() + task.x_begin * xbf16_row_, xbf16_row_, n, task.y, rows);
      } else {
        k.matmul_bf16(static_cast<const uint16_t*>(w.data), cols, task.r0, task.r1, x, cols, n,
                      task.y, rows);
      }
      break;
    case model::DType::kQ8_0:
      RunQuantized(task, thread, k.matmul_q8_0, k.matmul_q8_0_il, k.matmul_q8_0_panels, nullptr,
                   xq8_, xq8_row_);
      break;
    case model::DType::kQ4_0:
      RunQuantized(task, thread, k.matmul_q4_0, k.matmul_q4_0_il, k.matmul_q4_0_panels, nullptr,
                   xq8_, xq8_row_);
      break;
    case model::DType::kQ5_0:
      // (No panel layout for q5_0 and q5_1: their weights stay row-major.)
      RunQuantized(task, thread, k.matmul_q5_0, k.matmul_q5_0_il, nullptr, nullptr, xq8_, xq8_row_);
      break;
    case model::DType::kQ5_1:
      RunQuantized(task, thread, k.matmul_q5_1, k.matmul_q5_1_il, nullptr, nullptr, xq8_, xq8_row_);
      break;
    case model::DType::kQ4_K:
      RunQuantized(task, thread, k.matmul_q4_k, k.matmul_q4_k_il, k.matmul_q4_k_panels, nullptr,
                   xq8k_, xq8k_row_);
      break;
    case model::DType::kQ5_K:
      // (No panel layout for q5_K: its weights stay row-major.)
      RunQuantized(task, thread, k.matmul_q5_k, k.matmul_q5_k_il, nullptr, nullptr, xq8k_,
                   xq8k_row_);
      break;
    case model::DType::kQ6_K:
      RunQuantized(task, thread, k.matmul_q6_k, k.matmul_q6_k_il, k.matmul_q6_k_panels,
                   k.matmul_q6_k_panels_unpacked, xq8k_, xq8k_row_);
      break;
  }
}

void Gemm::RunQuantized(const Task& task, int thread, QMatMulFn rows, QMatMulFn interleaved,
                        QMatMulFn panels, QMatMulUnpackFn unpacked, const std::vector<uint8_t>& xq,
                        int64_t xq_row) {
  const model::TensorView& w = *task.w;
  if (w.layout != model::Layout::kRows && unpacked != nullptr && options_.quant_unpack) {
    std::vector<uint8_t>& scratch = unpack_scratch_[static_cast<size_t>(thread)];
    scratch.resize(kQuantUnpackScratchBytes);
    unpacked(Bytes(w), w.row_bytes(), w.cols, task.r0, task.r1, xq.data() + task.x_begin * xq_row,
             xq_row, task.n, task.y, w.rows, scratch.data(), static_cast<int64_t>(scratch.size()));
    return;
  }
  const QMatMulFn fn = w.layout != model::Layout::kRows ? panels
                       : interleaved_                   ? interleaved
                                                        : rows;
  fn(Bytes(w), w.row_bytes(), w.cols, task.r0, task.r1, xq.data() + task.x_begin * xq_row, xq_row,
     task.n, task.y, w.rows);
}

template <typename RowsFn>
void Gemm::ForActivationRows(int n, int64_t cols, const RowsFn& rows) {
  if (n == 1 || pool_->size() == 1 || n * cols < options_.quant_parallel_min_elements) {
    rows(0, n);
  } else {
    pool_->RunRanges(n, rows);
  }
}

void Gemm::QuantizeActivations(std::span<const RowsProduct> products, const float* x, int n) {
  const int64_t cols = products.front().w->cols;
  bool q8 = false;
  bool q8k = false;
  for (const RowsProduct& p : products) {
    q8 |= UsesQ8Blocks(p.w->type);
    q8k |= p.w->type == model::DType::kQ4_K || p.w->type == model::DType::kQ5_K ||
           p.w->type == model::DType::kQ6_K;
  }
  // One pass over n * cols floats (against rows * cols * n multiply-adds in the
  // products).
  auto quantize = [&](model::DType t, bool interleaved, std::vector<uint8_t>& buf,
                      int64_t& row_bytes) {
    row_bytes =
        static_cast<int64_t>(interleaved ? Q8RowBytesInterleaved(t, cols) : Q8RowBytes(t, cols));
    if (buf.size() < static_cast<size_t>(row_bytes * n)) buf.resize(row_bytes * n);
    ForActivationRows(n, cols, [&](int begin, int end) {
      for (int i = begin; i < end; ++i) {
        uint8_t* out = buf.data() + i * row_bytes;
        kernels_->quantize_activations(t, x + i * cols, cols, out);
        if (interleaved) InterleaveActivations(t, cols, out);
      }
    });
  };
  if (q8) quantize(model::DType::kQ8_0, interleaved_, xq8_, xq8_row_);
  if (q8k) quantize(model::DType::kQ4_K, interleaved_, xq8k_, xq8k_row_);
}

void Gemm::RoundActivations(const float* x, int n, int64_t cols, bool widened) {
  // Once per Run, so the slices share one copy instead of each rounding all n rows into
  // a buffer of its own (repeated work and cache footprint per slice).
  // One cache line more than the kernels need, so that rows of a multiple of 2 KiB do
  // not all map to the same L1 sets (the panel tiles read the same column of 8 rows at
  // once, and with a power-of-two stride those loads evict each other; both the row and
  // the panel kernels measured faster with the padded stride).
  xbf16_row_ = Bf16DotStride(cols) + 32;
  if (xbf16_.size() < static_cast<size_t>(xbf16_row_ * n)) xbf16_.resize(xbf16_row_ * n);
  if (widened && xbf16f_.size() < static_cast<size_t>(xbf16_row_ * n)) {
    xbf16f_.resize(xbf16_row_ * n);
  }
  ForActivationRows(n, cols, [&](int begin, int end) {
    for (int i = begin; i < end; ++i) {
      uint16_t* row = xbf16_.data() + i * xbf16_row_;
      kernels_->round_bf16(x + i * cols, cols, row);
      if (widened) kernels_->bf16_to_f32(row, xbf16f_.data() + i * xbf16_row_, cols);
    }
  });
}

void Gemm::PadActivations(const float* x, int n, int64_t cols) {
  // A copy with one cache line more per row, as RoundActivations pads for the bf16 panels
  // (where it was measured): the panel tiles read the same column of 8 rows at once, and
  // rows a multiple of 4 KiB apart would share L1 sets. One row has nothing to share sets
  // with: x as it is.
  if (n == 1) {
    xf32_rows_ = x;
    xf32_row_ = cols;
    return;
  }
  xf32_row_ = RoundUp(cols, 16) + 16;
  if (xf32_.size() < static_cast<size_t>(xf32_row_ * n)) xf32_.resize(xf32_row_ * n);
  xf32_rows_ = xf32_.data();
  ForActivationRows(n, cols, [&](int begin, int end) {
    for (int i = begin; i < end; ++i) {
      std::copy(x + i * cols, x + (i + 1) * cols, xf32_.data() + i * xf32_row_);
    }
  });
}

void Gemm::RunSgemm(const Task& task, const float* x, int thread) {
  const model::TensorView& w = *task.w;
  const int64_t rows = w.rows;
  const int64_t cols = w.cols;
  const int n = task.n;
  x += task.x_begin * cols;
  const int64_t nr = task.r1 - task.r0;
  const float* tile;  // [nr, cols]
  if (w.type == model::DType::kF32) {
    tile = static_cast<const float*>(w.data) + task.r0 * cols;
  } else {
    std::vector<float>& scratch = tiles_[static_cast<size_t>(thread)];
    if (scratch.size() < static_cast<size_t>(nr * cols)) scratch.resize(nr * cols);
    if (w.type == model::DType::kF16 || w.type == model::DType::kBF16) {
      const uint16_t* src = static_cast<const uint16_t*>(w.data) + task.r0 * cols;
      if (w.type == model::DType::kF16) {
        kernels_->f16_to_f32(src, scratch.data(), nr * cols);
      } else {
        kernels_->bf16_to_f32(src, scratch.data(), nr * cols);
      }
    } else {
      // Quantized: decoded row by row (model::DecodeRow); the sgemm that follows does
      // n multiply-adds per decoded element.
      for (int64_t r = 0; r < nr; ++r) {
        model::DecodeRow(w.type, w.row(task.r0 + r),
                         std::span<float>(scratch.data() + r * cols, static_cast<size_t>(cols)));
      }
    }
    tile = scratch.data();
  }
  // Y[:, r0:r1] = X[n, cols] · tile[nr, cols]^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, static_cast<int>(nr),
              static_cast<int>(cols), 1.0f, x, static_cast<int>(cols), tile, static_cast<int>(cols),
              0.0f, task.y + task.r0, static_cast<int>(rows));
}

}  // namespace kvserve::backends::cpu_blas
