// Projections Y = X · W^T of stacked activation rows against a weight matrix of any
// model::DType, split across a ThreadPool.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_GEMM_H_
#define KVSERVE_BACKENDS_CPU_BLAS_GEMM_H_

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "backends/cpu_blas/simd_kernels.h"
#include "backends/cpu_blas/thread_pool.h"
#include "model/panels.h"
#include "model/tensor.h"

namespace kvserve::backends::cpu_blas {

struct GemmOptions {
  // Every output row is computed with the same arithmetic (the same kernel, the same
  // summation order) whatever the number of activation rows in the product, so a
  // sequence's K/V rows and logits do not depend on its batch, its prefill chunking, or
  // whether its history was decoded, prefilled or fetched (issue "One session, one
  // truth": output independent of cache state). Turns off everything whose rounding
  // depends on the row count: OpenBLAS sgemm (sgemm_min_rows, quant_sgemm_min_rows and
  // the attention of prefill chunks, step_plan.h) and, for quantized weights in the row
  // layout, the switch between the one-row and the interleaved kernels
  // (quant_interleave_min_rows: the interleaved kernels for every row count where they
  // apply). The cost is measured in docs/performance.md ("Cache-state invariance").
  // Default true.
  bool batch_invariant = true;
  // Products with at least this many activation rows (of weights not in panels) run as
  // OpenBLAS sgemm over weight tiles (16-bit tiles are first converted to f32 in a per-thread
  // scratch of about tile_bytes); fewer rows use the SIMD kernels, which read each weight once for
  // all rows. Crossover measured with bench/kernels_bench.cc (BM_Gemm, 2048x768, two threads, AVX2,
  // GFLOP/s SIMD vs sgemm): 16 rows f32 79 vs 63, bf16 100 vs 63; 32 rows f32 93 vs 94, bf16 77 vs
  // 97; 64 rows f32 101 vs 103, bf16 72 vs 109. Default 32.
  int sgemm_min_rows = 32;
  // The same crossover for quantized weights (q8_0, q4_0, q4_K, q6_K) whose rows do not
  // take the interleaved layout below: under it the rows run through the integer kernels
  // against activations quantized to 8 bits; from it the weight tiles are decoded to f32
  // for sgemm (decoding costs about as much as 16 to 32 multiply-adds per element).
  // Default 64.
  int quant_sgemm_min_rows = 64;
  // From this many activation rows, products with quantized weights whose rows are a
  // multiple of 256 elements use the interleaved activation layout (q8_activations.h):
  // each weight block is transposed once, then every row sums eight blocks per
  // instruction chain. These products never go to sgemm: at 512 rows the interleaved
  // kernels beat decoded tiles + sgemm (bench/kernels_bench.cc BM_QuantLayout, 2048 x 768,
  // 2 threads, Zen 4, GFLOP/s interleaved vs sgemm: vpdpbusd q8_0 215 vs 147, q4_0 215 vs
  // 153, q4_K 199 vs 151; the AVX2 level on the same CPU 145 vs 154, 162 vs 148, 155 vs
  // 154, against OpenBLAS's AVX-512 sgemm; the register tiles of the VNNI level 433, 433,
  // 378). Default 2: BM_QuantLayout at 2 rows, us natural -> interleaved (VNNI tiles):
  // q8_0 89 -> 49, q4_0 81 -> 49, q4_K 50 -> 47, q6_K 69 -> 56; with the 256-bit
  // interleaved kernels the AVX2 and AVX-512 levels run (measured with vpdpbusd before
  // the tiles) 92 -> 95, 85 -> 65, 54 -> 53, 60 -> 61, and at 4 rows 123 -> 97,
  // 113 -> 87, 82 -> 76, 95 -> 92.
  int quant_interleave_min_rows = 2;
  // bf16 weights on CPUs with AVX512_BF16 (kernel level avx512bf16): multiply the
  // activations rounded to bf16 with vdpbf16ps (KernelSet::matmul_bf16_dot) instead of
  // the exact f32 products, for every row count (so a sequence's results do not depend
  // on its batch) and never sgemm. bench/kernels_bench.cc BM_Gemm (2048 x 768, 2 threads,
  // Zen 4; exact streaming -> bf16 dot): 1 row 28.5 -> 31.8 GB/s, 2 rows 40.6 -> 56.7
  // GFLOP/s, 8 rows 111 -> 148, 16 rows 133 -> 232, 512 rows 167 (sgemm 161) -> 349.
  // Default true.
  bool bf16_dot = true;
  // With bf16_dot, on the same CPUs: bf16 projection matrices in panels of 16 rows
  // (model/panels.h, KernelSet::matmul_bf16_panels), in which one pass over the
  // weights serves 8 activation rows and the weights stream in address order: as
  // the Model holds them when loaded with LoadOptions::panels (the server), else as
  // copies the cpu_blas backend packs at start (packed_weights.h; resident beside the
  // Model's own). tl1b bf16, 2 threads, Zen 5: batch 16 +55 %, batch 16 / batch 1 6.3–7.2
  // -> 7.8–9.4 (docs/performance.md, "bf16 weights in 16-row panels"). Default true.
  bool bf16_panels = true;
  // On CPUs with AVX-512 (kernel level avx512 and up): f32 projection matrices in panels of
  // 16 rows (model/panels.h, KernelSet::matmul_f32_panels), for every row count (never
  // sgemm), as bf16_panels says for bf16. bench/kernels_bench.cc BM_Gemm (2048 x 768, 2
  // threads, Zen 5, medians of 3; row-major streaming kernels or sgemm, the better ->
  // panels): 1 row 40.0 -> 55.2 GB/s, 4 rows 55.0 -> 72.8 GFLOP/s, 16 rows 150 -> 253, 64
  // rows 227 -> 309, 512 rows 313 -> 353; the model: docs/performance.md, "f32 weights in
  // 16-row panels". Default true.
  bool f32_panels = true;
  // On CPUs with AVX-512 VNNI (kernel level avx512vnni and up): q4_0, q8_0, q4_K and q6_K
  // projection matrices in panels of 16 rows (model/panels.h, KernelSet::
  // matmul_q4_0_panels, ...), for every row count: the same bytes as the row-major blocks,
  // regrouped so that one vpdpbusd multiplies 4 columns of 16 rows by one broadcast
  // activation word, 8 activation rows per pass, with no per-step decoding into a panel
  // and no horizontal sums. As for bf16_panels: packed by Model::Load
  // (LoadOptions::panels) or as copies. bench/kernels_bench.cc BM_QuantLayout (2048 x
  // 768, 2 threads, Zen 5, GFLOP/s, row-major -> panels; 1 row: the batch-1 kernels, more:
  // the interleaved tiles): q4_0 1 row 86 -> 100, 2 rows 98 -> 181, 16 rows 368 -> 517,
  // 64 rows 492 -> 656, 512 rows 547 -> 777; q8_0 1 row 72 -> 90, 2 rows 110 -> 148, 16
  // rows 353 -> 472, 64 rows 488 -> 620, 512 rows 542 -> 772; q4_K 1 row 96 -> 116, 2 rows
  // 123 -> 175, 16 rows 354 -> 413, 64 rows 471 -> 506; q6_K 1 row 72 -> 87, 2 rows 107 ->
  // 144, 16 rows 350 -> 309, 64 rows 452 -> 409. tl1b batch 16: q4_0 +33 %, q8_0 +29 %,
  // Q4_K_M +25 % (docs/performance.md, "q4_0 and q8_0 weights in 16-row panels", "q4_K and
  // q6_K weights in 16-row panels"). Default true.
  bool quant_panels = true;
  // Activations of at least this many elements (rows x columns) are quantized for the
  // integer kernels (or rounded to bf16 for bf16_dot) on the pool, a slice of rows per
  // task, instead of on the calling thread while the others wait (a 512-token tl1b q4_0
  // prefill spent ~3.4 % of its samples there, serially). Default 64 Ki elements (a
  // 16-row batch of tl1b stays on the caller).
  int64_t quant_parallel_min_elements = 64 * 1024;
  // Largest f32 weight tile handed to one sgemm call (16-bit and quantized tiles are
  // converted into a per-thread scratch of this size). Each call packs all activation
  // rows again, so small tiles of wide matrices repack them often: with 1 MiB, tl1b's
  // FFN down projection (5632 columns) went in tiles of 32 rows, 64 calls per product.
  // kvserve-bench backend --batches 1 on tl1b-f32.gguf, prefill 512, 2 threads, Zen 4, 3
  // alternated rounds (tok/s): 1 MiB with the old split (short last tile) 89.0/77.4/89.1,
  // equal tiles of 1 MiB 91.0/78.0/85.9, 2 MiB 93.7/93.1/92.7, 4 MiB 94.4/94.0/94.1;
  // s110m-f32 (at most 2048 columns) 984/845/981, 980/831/826, 967/825/970, 959/957/961;
  // BM_Gemm 2048 x 768 at 64 and 512 rows (f32, f16, bf16) within noise.
  // Default 4 MiB.
  int64_t tile_bytes = 4 << 20;

  // Products go to the pool in slices of about 8 per thread (all but sgemm, below), but
  // a slice of quantized weights holds at least quant_min_task_bytes / n weight bytes (n
  // activation rows), with at least one slice per thread. Each slice costs a claim, the
  // kernel's set-up (the quantized kernels copy the activation codes out of their
  // blocks once per call) and a cold start of its memory stream; at batch 1 the small
  // matrices of small quantized models went in slices of 20 KB (s110m q4_0, Wo), where
  // that cost is a large part of the slice. The float types keep 8 slices per thread:
  // s110m bf16 at batch 1 was 7 % slower with this rule. kvserve-bench backend, 2 threads, Zen 5
  // (docs/performance.md, "fewer, larger slices of quantized weights"). 0 = 8 slices per
  // thread. Default 1 MiB.
  int64_t quant_min_task_bytes = 1 << 20;
};

// Runs projections for one backend. OpenBLAS is called only from inside pool tasks, each
// call single-threaded on its own weight tile, so OpenBLAS threads never compete with
// the pool's (see SetOpenBlasSingleThreaded).
//
// Threading: like ThreadPool::Run, one caller thread at a time.
class Gemm {
 public:
  // `pool` and `kernels` must outlive the Gemm.
  Gemm(ThreadPool* pool, const KernelSet* kernels, const GemmOptions& options);

  // One product of a Run: y = x · w^T.
  struct Product {
    const model::TensorView* w;
    float* y;  // [n, w->rows]
  };

  // y[i, r] = sum_c W[r, c] * x[i, c]    for i in [0, n), r in [0, w.rows)
  // x: [n, w.cols] row-major; y: [n, w.rows] row-major. Precondition: n >= 1, y does not
  // alias x, and w.data holds w.rows * w.row_bytes() bytes (any model::DType; with
  // quantized weights, unless the product goes to sgemm (GemmOptions), x is first
  // quantized to 8 bits per block (q8_activations.h), which bounds the difference from
  // the float product). A view in a panel layout needs it in
  // PanelsReadable(kernels, options) (bf16 panels are multiplied as bf16_dot describes).
  void Run(const model::TensorView& w, const float* x, int n, float* y);

  // Several products of the same x (e.g. Q, K and V) in one parallel loop, so the pool
  // synchronises once. Precondition: as Run, for each product; at least one product;
  // all w->cols are equal.
  void Run(std::initializer_list<Product> products, const float* x, int n);

 private:
  // A slice of output rows [r0, r1) of one product.
  struct Task {
    const model::TensorView* w;
    float* y;
    int64_t r0;
    int64_t r1;
  };
  void RunStreaming(const Task& task, const float* x, int n);
  void RunSgemm(const Task& task, const float* x, int n, int thread);
  // A quantized product: `panels` for a view in a panel layout, else `interleaved` or
  // `rows` as interleaved_ says, against the activations xq (xq_row bytes per row).
  void RunQuantized(const Task& task, int n, QMatMulFn rows, QMatMulFn interleaved,
                    QMatMulFn panels, const std::vector<uint8_t>& xq, int64_t xq_row);
  // Fills xq8_ / xq8k_ with x in the activation formats the products' weights need.
  void QuantizeActivations(std::initializer_list<Product> products, const float* x, int n);
  // Fills xbf16_ with x rounded to bf16 for matmul_bf16_dot.
  void RoundActivations(const float* x, int n, int64_t cols);
  // Points xf32_rows_ at x's rows for matmul_f32_panels, xf32_row_ floats apart: x itself
  // for one row, else a padded copy in xf32_.
  void PadActivations(const float* x, int n, int64_t cols);
  // Calls rows(begin, end) over the n activation rows of `cols` elements: on the calling
  // thread (directly, no std::function), or from options_.quant_parallel_min_elements in
  // slices on the pool. Defined in gemm.cc, its only user.
  template <typename RowsFn>
  void ForActivationRows(int n, int64_t cols, const RowsFn& rows);

  ThreadPool* pool_;
  const KernelSet* kernels_;
  GemmOptions options_;
  std::vector<Task> tasks_;                // the current Run's slices
  std::vector<std::vector<float>> tiles_;  // per pool thread: [tile_rows, cols] f32
  std::vector<uint8_t>
      xq8_;  // [n] rows of Q8Block (Q8x8Block if interleaved_), xq8_row_ bytes each
  int64_t xq8_row_ = 0;
  std::vector<uint8_t> xq8k_;  // [n] rows of Q8KBlock, xq8k_row_ bytes each
  int64_t xq8k_row_ = 0;
  std::vector<uint16_t> xbf16_;  // [n] rows of bf16, xbf16_row_ elements each
  int64_t xbf16_row_ = 0;
  std::vector<float> xf32_;  // [n] rows of x, xf32_row_ floats each (n > 1)
  const float* xf32_rows_ = nullptr;
  int64_t xf32_row_ = 0;
  // The activations (xq8_, xq8k_) are interleaved: never when the Run reads quantized
  // panels, which take plain Q8Block / Q8KBlock rows (row-major products of the same Run
  // then use the kernels for plain rows too).
  bool interleaved_ = false;
  bool quant_panels_ = false;  // the current Run has a product in a quantized panel layout
  bool bf16_dot_ = false;      // the current Run's bf16 products use matmul_bf16_dot
};

// The panel layouts (model/panels.h) a Gemm with `kernels` and `options` can multiply
// (f32: matmul_f32_panels; bf16: bf16_dot and matmul_bf16_panels; the quantized types:
// their matmul_*_panels kernel), whatever GemmOptions::f32_panels, bf16_panels and
// quant_panels say.
model::PanelTypes PanelsReadable(const KernelSet& kernels, const GemmOptions& options);

// Those of them the options ask for (GemmOptions::f32_panels, bf16_panels, quant_panels): the
// layouts weights should be in for this Gemm.
model::PanelTypes PanelsWanted(const KernelSet& kernels, const GemmOptions& options);

// Sets OpenBLAS to run every call on the calling thread only. OpenBLAS's thread count is
// process-wide; cpu_blas parallelises around OpenBLAS with its own pool instead.
void SetOpenBlasSingleThreaded();

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_GEMM_H_
