// Projections Y = X · W^T of stacked activation rows against a weight matrix of any
// model::DType, split across a ThreadPool.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_GEMM_H_
#define KVSERVE_BACKENDS_CPU_BLAS_GEMM_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "backends/cpu_blas/bf16_products.h"
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
  // all rows. Few rows are bound by reading the weights, which the SIMD kernels do once; many
  // rows are bound by arithmetic, where sgemm's register blocking wins. The default is the
  // crossover of bench/kernels_bench.cc BM_Gemm (docs/performance.md, "Kernels alone").
  // Default 32.
  int sgemm_min_rows = 32;
  // The same crossover for quantized weights (q8_0, q4_0, q5_0, q5_1, q4_K, q5_K, q6_K) whose
  // rows do not take the interleaved layout below: under it the rows run through the integer
  // kernels against activations quantized to 8 bits; from it the weight tiles are decoded to f32
  // for sgemm (decoding costs about as much as 16 to 32 multiply-adds per element).
  // Default 64.
  int quant_sgemm_min_rows = 64;
  // From this many activation rows, products with quantized weights whose rows are a
  // multiple of 256 elements use the interleaved activation layout (q8_activations.h):
  // each weight block is transposed once, then every row sums eight blocks per
  // instruction chain. These products never go to sgemm: the integer kernels multiply
  // 8-bit codes, four products per lane and instruction, where sgemm would first decode
  // every weight tile to f32 and then multiply in f32, so even at hundreds of rows the
  // interleaved kernels keep up with or beat decoded tiles + sgemm. Default 2: from two
  // rows, transposing each weight block once costs less than the horizontal sums and
  // repeated block decoding of the one-row kernels (bench/kernels_bench.cc
  // BM_QuantLayout; docs/performance.md, "Quantized weights").
  int quant_interleave_min_rows = 2;
  // bf16 weights on CPUs with AVX512_BF16 (kernel level avx512bf16): multiply the
  // activations rounded to bf16 with vdpbf16ps (KernelSet::matmul_bf16_dot) instead of
  // the exact f32 products, for every row count (so a sequence's results do not depend
  // on its batch) and never sgemm. One vdpbf16ps does two multiply-adds per lane on the
  // weights as stored, where the exact path widens each bf16 weight to f32 first: the
  // bf16 dot is faster from one row (memory-bound) to hundreds (arithmetic-bound), where
  // it also beats sgemm (bench/kernels_bench.cc BM_Gemm; docs/performance.md, "Kernels
  // alone"). Default true.
  bool bf16_dot = true;
  // bf16 projection matrices in panels of 16 rows (model/panels.h), in which one pass over
  // the weights serves 8 activation rows and the weights stream in address
  // order: with bf16_dot on the CPUs above, KernelSet::matmul_bf16_panels (or _fma); on
  // the other x86-64 levels from avx2, or with bf16_dot off, matmul_bf16_panels_exact (the
  // exact f32 products of matmul_bf16, for every row count: never sgemm). As
  // the Model holds them when loaded with LoadOptions::panels (the server), else as
  // copies the cpu_blas backend packs at start (packed_weights.h; resident beside the
  // Model's own). Reading the weights in address order once per 8 rows is what lets a
  // batch run at the arithmetic bound rather than the row-major kernels' scattered streams
  // (docs/performance.md, "Weights in 16-row panels"). Default true.
  bool bf16_panels = true;
  // Which kernel multiplies those panels (bf16_products.h): kDpbf16 (vdpbf16ps), kFma
  // (each pair widened to f32, two FMAs: the same bits where the CPU's vdpbf16ps follows
  // Intel's definition) or kAuto, the faster of the two on this CPU as measured once per
  // process (Intel Emerald Rapids: FMA, about 1.5x prefill; AMD Zen 5, expected: vdpbf16ps).
  // Default kAuto.
  Bf16PanelKernel bf16_panel_kernel = Bf16PanelKernel::kAuto;
  // On CPUs with AVX2 (kernel level avx2 and up): f32 projection matrices in panels of
  // 16 rows (model/panels.h, KernelSet::matmul_f32_panels), for every row count (never
  // sgemm), as bf16_panels says for bf16: one address-ordered weight stream serves every
  // row count better than the row-major kernels or sgemm, each at its best (bench/
  // kernels_bench.cc BM_Gemm; docs/performance.md, "Weights in 16-row panels").
  // Default true.
  bool f32_panels = true;
  // q4_0 and q8_0 (kernel level avx2 and up) and q4_K and q6_K (avx512vnni and up)
  // projection matrices in panels of 16 rows (model/panels.h, KernelSet::
  // matmul_q4_0_panels, ...), for every row count: the same bytes as the row-major blocks,
  // regrouped so that one vpdpbusd (avx512vnni: 8 activation rows per pass) or vpmaddubsw
  // (avx2, avx512: 8 of the rows, 3 activation rows per pass) multiplies 4 columns by one
  // broadcast activation word, with no per-step decoding into a panel and no horizontal
  // sums. As for bf16_panels: packed by Model::Load
  // (LoadOptions::panels) or as copies. Without the per-step decoding and horizontal sums
  // more of each instruction slot is multiply-adds, at one row and at many; q6_K's
  // panels gain at one row and lose some at 16 and more, and a model runs its mix of
  // weight types (bench/kernels_bench.cc BM_QuantLayout; docs/performance.md, "Weights
  // in 16-row panels"). q5_K, q5_0 and q5_1 have no panel layout (their matrices stay
  // row-major). Default true.
  bool quant_panels = true;
  // q6_K panels against many activation rows (prefill): each slab of panels is unpacked
  // once per thread into codes of one byte (KernelSet::matmul_q6_k_panels_unpacked), so
  // that the passes over the activation rows no longer unpack the same codes each; bit
  // for bit the same results. false: every pass unpacks (the
  // kernels_bench baseline, BM_QuantLayout path 4). Default true.
  bool quant_unpack = true;
  // Activations of at least this many elements (rows x columns) are quantized for the
  // integer kernels (or rounded to bf16 for bf16_dot) on the pool, a slice of rows per
  // task, instead of on the calling thread while the others wait (serial work that grows
  // with the prompt and shows in prefill profiles). Default 64 Ki elements (a 16-row
  // batch of a small model stays on the caller, where handing out tasks would cost more).
  int64_t quant_parallel_min_elements = 64 * 1024;
  // Largest f32 weight tile handed to one sgemm call (16-bit and quantized tiles are
  // converted into a per-thread scratch of this size). Each call packs all activation
  // rows again, so small tiles of wide matrices repack them often (a 1 MiB tile of an FFN
  // down projection of 5632 columns is 32 rows: 64 calls per product). Larger tiles cost
  // only scratch memory; prefill of wide models gained up to 4 MiB, and matrices of at
  // most 2048 columns did not change (kvserve-bench prefill, bench/kernels_bench.cc
  // BM_Gemm). Default 4 MiB.
  int64_t tile_bytes = 4 << 20;

  // Products go to the pool in slices of about 8 per thread (all but sgemm, below), but
  // a slice of quantized weights holds at least quant_min_task_bytes / n weight bytes (n
  // activation rows), with at least one slice per thread. Each slice costs a claim, the
  // kernel's set-up (the quantized kernels copy the activation codes out of their
  // blocks once per call) and a cold start of its memory stream; at batch 1 the small
  // matrices of small quantized models went in slices of 20 KB (s110m q4_0, Wo), where
  // that cost is a large part of the slice. The float types keep 8 slices per thread:
  // their kernels have no such set-up, and fewer slices only balanced the threads worse
  // (measured with kvserve-bench at batch 1). 0 = 8 slices per thread. Default 1 MiB.
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
  // PanelsReadable(kernels, options) (bf16 panels are multiplied as bf16_dot describes where
  // it applies, else exactly: KernelSet::matmul_bf16_panels_exact).
  void Run(const model::TensorView& w, const float* x, int n, float* y);

  // Several products of the same x (e.g. Q, K and V) in one parallel loop, so the pool
  // synchronises once. Precondition: as Run, for each product; at least one product;
  // all w->cols are equal.
  void Run(std::initializer_list<Product> products, const float* x, int n);

  // One product of a RunGroups: y = x[x_begin, x_begin + n) · w^T.
  struct RowsProduct {
    const model::TensorView* w;
    float* y;     // [n, w->rows]
    int x_begin;  // first activation row of x
    int n;        // activation rows; 0 = nothing to compute
  };

  // Products of row ranges of one x in one parallel loop, e.g. every selected expert's
  // gate and up projections over the rows routed to it (a mixture of experts): the pool
  // synchronises once for all of them, x is quantized (or rounded, or padded) once for
  // its n rows, and the slices of all products (product, output-row range) are shared
  // among the threads. Every y row is bit for bit what Run(*w, x + x_begin * cols, n, y)
  // computes: with GemmOptions::batch_invariant (the default) a row's arithmetic does not
  // depend on its product's row count, so the products run together; without it the
  // kernel choice does, and each range of consecutive products over the same rows runs
  // as one Run of its own. Products of no rows are skipped. Precondition: as Run, for each
  // product with rows; all w->cols are equal; each product's x_begin + n is at most the
  // row count `n` of x.
  void RunGroups(std::span<const RowsProduct> products, const float* x, int n);

 private:
  // A slice of output rows [r0, r1) of one product, over activation rows
  // [x_begin, x_begin + n).
  struct Task {
    const model::TensorView* w;
    float* y;  // [n, w->rows]
    int64_t r0;
    int64_t r1;
    int x_begin;
    int n;
  };
  // The products of a Run or RunGroups (each with n > 0) in one parallel loop, the kernel
  // choices made for x's n rows. Precondition: batch invariance, or every product's n is n.
  void RunProducts(std::span<const RowsProduct> products, const float* x, int n);
  void RunStreaming(const Task& task, const float* x, int thread);
  void RunSgemm(const Task& task, const float* x, int thread);
  // A quantized product: `panels` for a view in a panel layout (or `unpacked` where the
  // level has it, with the pool thread's unpack scratch), else `interleaved` or `rows` as
  // interleaved_ says, against the activations xq (xq_row bytes per row).
  void RunQuantized(const Task& task, int thread, QMatMulFn rows, QMatMulFn interleaved,
                    QMatMulFn panels, QMatMulUnpackFn unpacked, const std::vector<uint8_t>& xq,
                    int64_t xq_row);
  // Fills xq8_ / xq8k_ with x in the activation formats the products' weights need.
  void QuantizeActivations(std::span<const RowsProduct> products, const float* x, int n);
  // Fills xbf16_ with x rounded to bf16 for matmul_bf16_dot and matmul_bf16_panels, and
  // with `widened` also xbf16f_ with the same values as floats (matmul_bf16_panels_fma).
  void RoundActivations(const float* x, int n, int64_t cols, bool widened);
  // Points xf32_rows_ at x's rows for matmul_f32_panels and matmul_bf16_panels_exact,
  // xf32_row_ floats apart: x itself
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
  std::vector<RowsProduct> products_;      // the current Run's products (n > 0)
  std::vector<RowsProduct> range_;         // RunGroups without batch invariance: one range
  std::vector<std::vector<float>> tiles_;  // per pool thread: [tile_rows, cols] f32
  // Per pool thread: kQuantUnpackScratchBytes for the q6_K panels' unpacked slabs (on
  // first use).
  std::vector<std::vector<uint8_t>> unpack_scratch_;
  std::vector<uint8_t>
      xq8_;  // [n] rows of Q8Block (Q8x8Block if interleaved_), xq8_row_ bytes each
  int64_t xq8_row_ = 0;
  std::vector<uint8_t> xq8k_;  // [n] rows of Q8KBlock, xq8k_row_ bytes each
  int64_t xq8k_row_ = 0;
  std::vector<uint16_t> xbf16_;  // [n] rows of bf16, xbf16_row_ elements each
  int64_t xbf16_row_ = 0;
  std::vector<float> xbf16f_;  // [n] rows of xbf16_ as floats, xbf16_row_ elements each
  std::vector<float> xf32_;    // [n] rows of x, xf32_row_ floats each (n > 1)
  const float* xf32_rows_ = nullptr;
  int64_t xf32_row_ = 0;
  // The activations (xq8_, xq8k_) are interleaved: never when the Run reads quantized
  // panels, which take plain Q8Block / Q8KBlock rows (row-major products of the same Run
  // then use the kernels for plain rows too).
  bool interleaved_ = false;
  bool quant_panels_ = false;  // the current Run has a product in a quantized panel layout
  bool bf16_dot_ = false;      // the current Run's bf16 products use matmul_bf16_dot
  // bf16 panels use matmul_bf16_panels_fma (options_.bf16_panel_kernel, resolved).
  bool bf16_panels_fma_ = false;
};

// The panel layouts (model/panels.h) a Gemm with `kernels` and `options` can multiply
// (f32: matmul_f32_panels; bf16: matmul_bf16_panels where UsesBf16Dot, else
// matmul_bf16_panels_exact; the quantized types: their matmul_*_panels kernel), whatever
// GemmOptions::f32_panels, bf16_panels and quant_panels say.
model::PanelTypes PanelsReadable(const KernelSet& kernels, const GemmOptions& options);

// Whether a Gemm with `kernels` and `options` multiplies bf16 weights against activations
// rounded to bf16 (GemmOptions::bf16_dot, where the kernels have matmul_bf16_dot).
bool UsesBf16Dot(const KernelSet& kernels, const GemmOptions& options);

// Those of them the options ask for (GemmOptions::f32_panels, bf16_panels, quant_panels): the
// layouts weights should be in for this Gemm.
model::PanelTypes PanelsWanted(const KernelSet& kernels, const GemmOptions& options);

// Sets OpenBLAS to run every call on the calling thread only. OpenBLAS's thread count is
// process-wide; cpu_blas parallelises around OpenBLAS with its own pool instead.
void SetOpenBlasSingleThreaded();

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_GEMM_H_
