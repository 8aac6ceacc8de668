// Micro-benchmarks of the cpu_blas kernels and of whole cpu_blas steps on a random model
// with the s110m shape (dim 768, 12 layers, 12 heads, FFN 2048, vocab 32000).
//
//   kernels_bench --benchmark_filter=Bandwidth|Decode
//
// Counters: GB/s is bytes read from weights (or the buffer) per second; tok/s counts
// tokens processed per second; bound% is the decode rate as a share of the measured
// two-thread read bandwidth (BM_ReadBandwidth) divided by the weight bytes per token.
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu_blas/blas_startup.h"
#include "backends/cpu_blas/cpu_blas_backend.h"
#include "backends/cpu_blas/gemm.h"
#include "backends/cpu_blas/packed_weights.h"
#include "backends/cpu_blas/q8_activations.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "backends/cpu_blas/thread_pool.h"
#include "backends/kv_arena.h"
#include "backends/testing/random_model.h"
#include "bench/model_runner.h"
#include "benchmark/benchmark.h"
#include "model/dtype.h"

namespace kvserve::bench {
namespace {

using backends::cpu_blas::Isa;
using model::DType;

DType DTypeArg(int64_t v) { return static_cast<DType>(v); }

// ---------------------------------------------------------------------------------------
// Read bandwidth: `threads` threads each sum their share of a 1 GiB buffer with four
// independent AVX2 accumulators (a naive single stream underestimates the bus).

__attribute__((target("avx2"))) double SumAvx2(const float* p, size_t n) {
  __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a = _mm256_add_ps(a, _mm256_loadu_ps(p + i));
    b = _mm256_add_ps(b, _mm256_loadu_ps(p + i + 8));
    c = _mm256_add_ps(c, _mm256_loadu_ps(p + i + 16));
    d = _mm256_add_ps(d, _mm256_loadu_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
  double s = 0;
  for (float v : out) s += v;
  return s;
}

void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const size_t n = (size_t{1} << 30) / sizeof(float);
  std::vector<float> buffer(n, 1.0f);
  for (auto _ : state) {
    std::vector<std::thread> workers;
    std::vector<double> sums(threads);
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        const size_t chunk = n / threads;
        sums[t] = SumAvx2(buffer.data() + t * chunk, chunk);
      });
    }
    for (std::thread& w : workers) w.join();
    benchmark::DoNotOptimize(sums);
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(n * sizeof(float)) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// Issue peaks: `threads` threads each run one instruction on registers only, 12
// independent accumulators (enough to cover its latency on every pipe that executes it),
// no memory traffic. These are the ceilings the batched kernels are held against
// (docs/performance.md, "Ceilings"): the float FMA for f32 and f16 weights, vpdpbusd for
// the quantized kernels, vdpbf16ps for the bf16 dot. Written in assembly so that the
// count is exact (GCC keeps intrinsic accumulators in memory under some unrollings).
// Kind 4 is the quantized kernels' mix at its leanest: per four vpdpbusd one vcvtdq2ps
// and one vfmadd231ps (the block scale), counting only the vpdpbusd operations; on Zen 4
// it issues 80 % of kind 2, because they share execution pipes.
// Args: kind (0 vfmadd231ps ymm, 1 vfmadd231ps zmm, 2 vpdpbusd zmm, 3 vdpbf16ps zmm,
// 4 the mix), threads. Counter Gop/s: a multiply and an add count as two operations.
struct PeakKind {
  const char* name;
  Isa isa;                // the level that has the instructions
  int ops_per_iteration;  // counted operations per loop iteration
};
constexpr PeakKind kPeakKinds[] = {
    {"vfmadd231ps ymm", Isa::kAvx2, 12 * 16},
    {"vfmadd231ps zmm", Isa::kAvx512, 12 * 32},
    {"vpdpbusd zmm", Isa::kAvx512Vnni, 12 * 128},
    {"vdpbf16ps zmm", Isa::kAvx512Bf16, 12 * 64},
    {"4 vpdpbusd zmm + vcvtdq2ps + vfmadd231ps", Isa::kAvx512Vnni, 8 * 128}};

#define KVSERVE_PEAK_OPS(op, r)                                                                   \
  op " %%" r "12, %%" r "13, %%" r "0\n\t" op " %%" r "12, %%" r "13, %%" r "1\n\t" op " %%" r    \
     "12, %%" r "13, %%" r "2\n\t" op " %%" r "12, %%" r "13, %%" r "3\n\t" op " %%" r "12, %%" r \
     "13, %%" r "4\n\t" op " %%" r "12, %%" r "13, %%" r "5\n\t" op " %%" r "12, %%" r "13, %%" r \
     "6\n\t" op " %%" r "12, %%" r "13, %%" r "7\n\t" op " %%" r "12, %%" r "13, %%" r "8\n\t" op \
     " %%" r "12, %%" r "13, %%" r "9\n\t" op " %%" r "12, %%" r "13, %%" r "10\n\t" op " %%" r   \
     "12, %%" r "13, %%" r "11\n\t"
// Four vpdpbusd into a..d, a vcvtdq2ps into e and a vfmadd231ps into f.
#define KVSERVE_PEAK_MIX(a, b, c, d, e, f)                                          \
  "vpdpbusd %%zmm12, %%zmm13, %%zmm" a "\n\tvpdpbusd %%zmm12, %%zmm13, %%zmm" b     \
  "\n\tvpdpbusd %%zmm12, %%zmm13, %%zmm" c "\n\tvpdpbusd %%zmm12, %%zmm13, %%zmm" d \
  "\n\tvcvtdq2ps %%zmm12, %%zmm" e "\n\tvfmadd231ps %%zmm12, %%zmm13, %%zmm" f "\n\t"
// Zeroes the 14 registers (a VEX xor clears the whole zmm), then `iterations` x 12 ops.
#define KVSERVE_PEAK_LOOP(ops)                                                                \
  __asm__ volatile(                                                                           \
      "vpxor %%xmm0, %%xmm0, %%xmm0\n\tvpxor %%xmm1, %%xmm1, %%xmm1\n\t"                      \
      "vpxor %%xmm2, %%xmm2, %%xmm2\n\tvpxor %%xmm3, %%xmm3, %%xmm3\n\t"                      \
      "vpxor %%xmm4, %%xmm4, %%xmm4\n\tvpxor %%xmm5, %%xmm5, %%xmm5\n\t"                      \
      "vpxor %%xmm6, %%xmm6, %%xmm6\n\tvpxor %%xmm7, %%xmm7, %%xmm7\n\t"                      \
      "vpxor %%xmm8, %%xmm8, %%xmm8\n\tvpxor %%xmm9, %%xmm9, %%xmm9\n\t"                      \
      "vpxor %%xmm10, %%xmm10, %%xmm10\n\tvpxor %%xmm11, %%xmm11, %%xmm11\n\t"                \
      "vpxor %%xmm12, %%xmm12, %%xmm12\n\tvpxor %%xmm13, %%xmm13, %%xmm13\n\t"                \
      "1:\n\t" ops "dec %0\n\tjnz 1b\n\tvzeroupper"                                           \
      : "+r"(iterations)                                                                      \
      :                                                                                       \
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
        "xmm10", "xmm11", "xmm12", "xmm13")

void IssueLoop(int kind, int64_t iterations) {
  switch (kind) {
    case 0:
      KVSERVE_PEAK_LOOP(KVSERVE_PEAK_OPS("vfmadd231ps", "ymm"));
      break;
    case 1:
      KVSERVE_PEAK_LOOP(KVSERVE_PEAK_OPS("vfmadd231ps", "zmm"));
      break;
    case 2:
      KVSERVE_PEAK_LOOP(KVSERVE_PEAK_OPS("vpdpbusd", "zmm"));
      break;
    case 3:
      KVSERVE_PEAK_LOOP(KVSERVE_PEAK_OPS("vdpbf16ps", "zmm"));
      break;
    default:
      KVSERVE_PEAK_LOOP(KVSERVE_PEAK_MIX("0", "1", "2", "3", "8", "10")
                            KVSERVE_PEAK_MIX("4", "5", "6", "7", "9", "11"));
      break;
  }
}
#undef KVSERVE_PEAK_LOOP
#undef KVSERVE_PEAK_OPS
#undef KVSERVE_PEAK_MIX

void BM_IssuePeak(benchmark::State& state) {
  const PeakKind& kind = kPeakKinds[state.range(0)];
  const int threads = static_cast<int>(state.range(1));
  if (!backends::cpu_blas::IsaSupported(kind.isa)) {
    state.SkipWithError("the CPU lacks this instruction");
    return;
  }
  state.SetLabel(kind.name);
  constexpr int64_t kIterations = 10'000'000;
  for (auto _ : state) {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] { IssueLoop(static_cast<int>(state.range(0)), kIterations); });
    }
    for (std::thread& w : workers) w.join();
  }
  state.counters["Gop/s"] =
      benchmark::Counter(static_cast<double>(threads) * kIterations * kind.ops_per_iteration * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_IssuePeak)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 2}})
    ->ArgNames({"kind", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------
// One projection Y[n, rows] = X[n, cols] · W^T through cpu_blas::Gemm, with a weight set
// larger than the caches (the matrices cycle), as in a decode step.

struct MatrixSet {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<model::TensorView> views;
};

MatrixSet MakeMatrices(DType dtype, int64_t rows, int64_t cols, size_t total_bytes) {
  MatrixSet set;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::vector<float> row(static_cast<size_t>(cols));
  const size_t one = model::DTypeBytes(dtype, static_cast<size_t>(rows * cols));
  for (size_t made = 0; made < total_bytes; made += one) {
    std::vector<uint8_t>& b = set.bytes.emplace_back();
    b.reserve(one);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = u(rng);
      std::vector<uint8_t> enc = backends::testing::EncodeRow(row, dtype);
      b.insert(b.end(), enc.begin(), enc.end());
    }
    set.views.push_back(model::TensorView{dtype, b.data(), rows, cols});
  }
  return set;
}

// Times gemm.Run over the matrices of `set` in turn (rows x cols each) with n activation
// rows.
void TimeProducts(benchmark::State& state, backends::cpu_blas::Gemm& gemm, const MatrixSet& set,
                  int n) {
  const int64_t rows = set.views[0].rows, cols = set.views[0].cols;
  std::vector<float> x(static_cast<size_t>(n * cols), 0.5f), y(static_cast<size_t>(n * rows));
  size_t i = 0;
  for (auto _ : state) {
    gemm.Run(set.views[i], x.data(), n, y.data());
    i = (i + 1) % set.views.size();
    benchmark::ClobberMemory();
  }
}

// The kernel level BM_Gemm and BM_QuantLayout run: the best this CPU has, or the one named by the
// environment variable KVSERVE_BENCH_ISA (cpu_blas::IsaName: scalar, avx2, avx_vnni, avx512,
// avx512vnni, ...; must be supported), to compare levels on one machine.
backends::cpu_blas::Isa BenchIsa() {
  const char* forced = std::getenv("KVSERVE_BENCH_ISA");
  if (forced == nullptr) return backends::cpu_blas::BestIsa();
  for (const backends::cpu_blas::Isa isa : backends::cpu_blas::kAllIsas) {
    if (backends::cpu_blas::IsaName(isa) != forced) continue;
    if (backends::cpu_blas::IsaSupported(isa)) return isa;
    std::fprintf(stderr, "KVSERVE_BENCH_ISA=%s: not supported by this CPU\n", forced);
    std::exit(2);
  }
  std::fprintf(stderr, "KVSERVE_BENCH_ISA=%s: no such kernel level\n", forced);
  std::exit(2);
}

// Args: dtype, activation rows n, threads, sgemm_min_rows, bf16_dot (GemmOptions, 0/1;
// 2: the weights packed into panels, f32, or bf16 with bf16_dot; 3: bf16 panels without
// bf16_dot, KernelSet::matmul_bf16_panels_exact). The kernel level: BenchIsa().
void BM_Gemm(benchmark::State& state) {
  const DType dtype = DTypeArg(state.range(0));
  const int n = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  backends::cpu_blas::GemmOptions options;
  options.batch_invariant = false;  // the crossovers below choose the path
  options.sgemm_min_rows = static_cast<int>(state.range(3));
  options.quant_sgemm_min_rows = options.sgemm_min_rows;
  options.bf16_dot = state.range(4) == 1 || state.range(4) == 2;
  const bool panels = state.range(4) >= 2;
  const backends::cpu_blas::KernelSet& kernels = backends::cpu_blas::KernelsFor(BenchIsa());
  if (panels && !backends::cpu_blas::PanelsReadable(kernels, options).has(dtype)) {
    state.SkipWithError("this kernel level (and bf16_dot) has no panels of this type");
    return;
  }
  const int64_t rows = 2048, cols = 768;
  MatrixSet set = MakeMatrices(dtype, rows, cols, size_t{256} << 20);
  backends::cpu_blas::SetOpenBlasSingleThreaded();
  backends::cpu_blas::ThreadPool pool(threads);
  // Panels: every matrix packed (as the backend does at start), the row-major bytes freed.
  std::vector<std::unique_ptr<backends::cpu_blas::PanelMatrix>> packed;
  if (panels) {
    for (model::TensorView& v : set.views) {
      packed.push_back(std::make_unique<backends::cpu_blas::PanelMatrix>(v));
      v = packed.back()->view();
    }
    set.bytes.clear();
  }
  backends::cpu_blas::Gemm gemm(&pool, &kernels, options);
  TimeProducts(state, gemm, set, n);
  const double bytes = static_cast<double>(model::DTypeBytes(dtype, rows * cols));
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * n * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
void GemmArgs(benchmark::internal::Benchmark* b) {
  // DType numbering: 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0, 5 q4_K, 6 q6_K, 7 q5_K, 8 q5_0,
  // 9 q5_1.
  for (int64_t dtype : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
    for (int64_t n : {1, 2, 4, 8, 16, 32, 64, 128, 512}) {
      for (int64_t threads : {1, 2}) {
        b->Args({dtype, n, threads, 1 << 20, 0});  // streaming kernels
        b->Args({dtype, n, threads, 1, 0});        // sgemm tiles
        // bf16 with vdpbf16ps where the CPU has it (otherwise as streaming), on row-major
        // weights (1) and on the panel layout (2, packed_weights.h); f32 on its panel layout;
        // bf16 panels multiplied exactly (3).
        if (dtype == 2) b->Args({dtype, n, threads, 1 << 20, 1});
        if (dtype == 0 || dtype == 2) b->Args({dtype, n, threads, 1 << 20, 2});
        if (dtype == 2) b->Args({dtype, n, threads, 1 << 20, 3});
      }
    }
  }
  b->ArgNames({"dtype", "n", "threads", "sgemm_min", "bf16_dot"});
}
BENCHMARK(BM_Gemm)->Apply(GemmArgs)->UseRealTime();

// Quantized products of a few activation rows with the natural and the interleaved
// activation layout (GemmOptions::quant_interleave_min_rows), 2 threads, 2048 x 768
// weights cycling through 64 MB (encoded once per dtype and kept: the k-quant encoders
// take seconds). Args: dtype (as BM_Gemm), n, path (0 natural layout, 1 interleaved,
// 2 sgemm on decoded tiles, 3 weights packed in panels: matmul_q4_0_panels, ..., with
// q6_K unpacked once per slab for many rows (GemmOptions::quant_unpack), 4 the same
// panels unpacked in every pass).
const MatrixSet& QuantSetFor(DType dtype) {
  static std::unique_ptr<MatrixSet> set;
  static DType made = DType::kF32;
  if (!set || made != dtype) {
    set = std::make_unique<MatrixSet>(MakeMatrices(dtype, 2048, 768, size_t{64} << 20));
    made = dtype;
  }
  return *set;
}

void BM_QuantLayout(benchmark::State& state) {
  const DType dtype = DTypeArg(state.range(0));
  const int n = static_cast<int>(state.range(1));
  backends::cpu_blas::GemmOptions options;
  const int64_t path = state.range(2);
  options.batch_invariant = false;  // the crossovers below choose the path
  options.quant_interleave_min_rows = path == 1 ? 1 : 1 << 20;
  options.quant_sgemm_min_rows = path == 2 ? 1 : 1 << 20;
  options.quant_unpack = path != 4;
  const bool in_panels = path == 3 || path == 4;
  const int64_t rows = 2048, cols = 768;
  const backends::cpu_blas::KernelSet& kernels = backends::cpu_blas::KernelsFor(BenchIsa());
  if (in_panels && !backends::cpu_blas::PanelsReadable(kernels, options).has(dtype)) {
    state.SkipWithError("this kernel level has no panels of this type");
    return;
  }
  MatrixSet panels;  // paths 3 and 4: packed copies of the set (views only)
  std::vector<std::unique_ptr<backends::cpu_blas::PanelMatrix>> packed;
  if (in_panels) {
    for (const model::TensorView& v : QuantSetFor(dtype).views) {
      packed.push_back(std::make_unique<backends::cpu_blas::PanelMatrix>(v));
      panels.views.push_back(packed.back()->view());
    }
  }
  const MatrixSet& set = in_panels ? panels : QuantSetFor(dtype);
  backends::cpu_blas::ThreadPool pool(2);
  backends::cpu_blas::Gemm gemm(&pool, &kernels, options);
  TimeProducts(state, gemm, set, n);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * n * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
void QuantLayoutArgs(benchmark::internal::Benchmark* b) {
  for (int64_t dtype : {3, 4, 5, 6}) {
    for (int64_t n : {1, 2, 4, 8, 16, 32}) {
      for (int64_t path : {0, 1}) b->Args({dtype, n, path});
    }
    for (int64_t n : {16, 64, 128, 512}) {
      for (int64_t path : {1, 2}) b->Args({dtype, n, path});
    }
    for (int64_t n : {1, 2, 4, 8, 16, 32, 64, 128, 512}) b->Args({dtype, n, 3});
    if (dtype == 6) {  // q6_K: unpacked once per slab (path 3) or in every pass
      for (int64_t n : {8, 16, 32, 64, 128, 512}) b->Args({dtype, n, 4});
    }
  }
  b->ArgNames({"dtype", "n", "path"});
}
BENCHMARK(BM_QuantLayout)->Apply(QuantLayoutArgs)->UseRealTime();

// One activation row quantized for quantized weights (KernelSet::quantize_activations),
// as a decode step does once per product on the calling thread. Args: dtype (as BM_Gemm;
// 3 q8_0 blocks of 32, 5 q4_K blocks of 256), cols, level (Isa; must be supported).
void BM_QuantizeActivations(benchmark::State& state) {
  const DType dtype = DTypeArg(state.range(0));
  const int64_t cols = state.range(1);
  const auto isa = static_cast<Isa>(state.range(2));
  if (!backends::cpu_blas::IsaSupported(isa)) {
    state.SkipWithError("kernel level not supported by this CPU");
    return;
  }
  const backends::cpu_blas::KernelSet& kernels = backends::cpu_blas::KernelsFor(isa);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> out(backends::cpu_blas::Q8RowBytes(dtype, cols));
  for (auto _ : state) {
    kernels.quantize_activations(dtype, x.data(), cols, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_QuantizeActivations)
    ->ArgsProduct({{3, 5}, {768, 2048}, {0, 1, 2}})
    ->ArgNames({"dtype", "cols", "isa"});

// A prefill-sized product Y[512, 2048] = X[512, 768] · W^T: one multi-threaded OpenBLAS
// call (f32 only) versus cpu_blas's tiles (one single-threaded OpenBLAS call per tile on
// each pool thread). Args: dtype, mode (0 = OpenBLAS threads, 1 = pool tiles), tile KiB.
void BM_PrefillSgemm(benchmark::State& state) {
  const DType dtype = DTypeArg(state.range(0));
  const bool tiles = state.range(1) == 1;
  const int n = 512;
  const int64_t rows = 2048, cols = 768;
  const MatrixSet set = MakeMatrices(dtype, rows, cols, 1);
  std::vector<float> x(static_cast<size_t>(n * cols), 0.5f), y(static_cast<size_t>(n * rows));
  backends::cpu_blas::ThreadPool pool(2);
  backends::cpu_blas::GemmOptions options;
  options.batch_invariant = false;  // sgemm
  options.sgemm_min_rows = 1;
  options.tile_bytes = state.range(2) * 1024;
  backends::cpu_blas::Gemm gemm(
      &pool, &backends::cpu_blas::KernelsFor(backends::cpu_blas::BestIsa()), options);
  openblas_set_num_threads(tiles ? 1 : 2);
  for (auto _ : state) {
    if (tiles) {
      gemm.Run(set.views[0], x.data(), n, y.data());
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, cols, 1.0f, x.data(), cols,
                  static_cast<const float*>(set.views[0].data), cols, 0.0f, y.data(), rows);
    }
    benchmark::ClobberMemory();
  }
  openblas_set_num_threads(1);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * n * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PrefillSgemm)
    ->Args({0, 0, 0})
    ->ArgsProduct({{0, 1, 2}, {1}, {256, 1024, 4096}})
    ->ArgNames({"dtype", "tiles", "tile_kib"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------
// Whole steps of cpu_blas on an s110m-shaped random model.

model::ModelConfig S110m() {
  model::ModelConfig c;
  c.dim = 768;
  c.n_layers = 12;
  c.n_heads = 12;
  c.n_kv_heads = 12;
  c.head_dim = 64;
  c.rope_dim = 64;
  c.ffn_dim = 2048;
  c.vocab_size = 32000;
  c.context_length = 8192;  // BM_PrefillAfterContext's 4,096 cached positions and more
  return c;
}

// The model of the last dtype asked for (one at a time: 440 MB in f32).
const model::Model& ModelFor(DType dtype) {
  static std::unique_ptr<model::Model> model;
  static DType made = DType::kQ8_0;
  if (!model || made != dtype) {
    model.reset();
    backends::testing::RandomModelOptions options;
    options.config = S110m();
    options.dtype = dtype;
    auto m = backends::testing::MakeRandomModel(options);
    if (!m.ok()) std::abort();
    model = std::move(*m);
    made = dtype;
  }
  return *model;
}

// A cpu_blas backend on `threads` threads over the s110m-shaped model of `dtype`, with
// KV blocks of 16 f16 positions (`layout`); aborts when it cannot be built.
struct Step {
  const model::Model& model;
  model::KvLayout layout;
  std::unique_ptr<backends::CpuBlasBackend> backend;
};

Step CpuBlasStep(DType dtype, int threads) {
  const model::Model& m = ModelFor(dtype);
  const model::KvLayout layout = model::KvLayout::ForModel(m.config(), 16, DType::kF16);
  backends::CpuBlasOptions options;
  options.threads = threads;
  auto backend = backends::CpuBlasBackend::Create(m, layout, options);
  if (!backend.ok()) std::abort();
  return Step{m, layout, *std::move(backend)};
}

// Args: dtype, batch (concurrent sequences, one new token each), threads.
// Positions cycle through [64, 320) so attention cost is that of a short chat.
void BM_Decode(benchmark::State& state) {
  const DType dtype = DTypeArg(state.range(0));
  const int batch_size = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  Step step = CpuBlasStep(dtype, threads);
  const model::Model& m = step.model;
  backends::KvArena arena(step.layout, /*populate=*/true);
  std::vector<std::span<uint8_t* const>> blocks;
  for (int i = 0; i < batch_size; ++i) blocks.push_back(arena.Allocate(320));
  std::vector<std::vector<int32_t>> tokens(batch_size, std::vector<int32_t>{1});
  std::vector<float> logits(static_cast<size_t>(batch_size) * m.config().vocab_size);
  int pos = 64;
  for (auto _ : state) {
    backends::Batch batch;
    for (int i = 0; i < batch_size; ++i) {
      tokens[i][0] = (pos * 31 + i * 7) % m.config().vocab_size;
      batch.sequences.push_back(backends::SequenceInput{tokens[i], pos, blocks[i], true});
    }
    if (!step.backend->Forward(batch, logits).ok()) std::abort();
    pos = pos + 1 == 320 ? 64 : pos + 1;
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(batch_size),
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(WeightBytesPerToken(m.weights())) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(model::DTypeName(dtype)) + " " +
                 std::string(backends::cpu_blas::IsaName(step.backend->isa())));
}
void DecodeArgs(benchmark::internal::Benchmark* b) {
  for (int64_t dtype : {0, 1, 2}) {
    for (int64_t batch : {1, 4, 16}) b->Args({dtype, batch, 2});
  }
  b->Args({0, 1, 1});
  b->Args({2, 1, 1});
  b->ArgNames({"dtype", "batch", "threads"});
}
BENCHMARK(BM_Decode)->Apply(DecodeArgs)->UseRealTime()->Unit(benchmark::kMillisecond);

// Args: dtype, prompt tokens, threads: one prefill chunk from position 0.
void BM_Prefill(benchmark::State& state) {
  const DType dtype = DTypeArg(state.range(0));
  const int n = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  Step step = CpuBlasStep(dtype, threads);
  const model::Model& m = step.model;
  backends::KvArena arena(step.layout, /*populate=*/true);
  std::span<uint8_t* const> blocks = arena.Allocate(n);
  std::vector<int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = (i * 131 + 7) % m.config().vocab_size;
  std::vector<float> logits(m.config().vocab_size);
  for (auto _ : state) {
    backends::Batch batch;
    batch.sequences.push_back(backends::SequenceInput{tokens, 0, blocks, true});
    if (!step.backend->Forward(batch, logits).ok()) std::abort();
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(model::DTypeName(dtype)));
}
BENCHMARK(BM_Prefill)
    ->Args({0, 512, 2})
    ->Args({1, 512, 2})
    ->Args({2, 512, 2})
    ->ArgNames({"dtype", "tokens", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Args: dtype, cached positions, new tokens, threads: one chunk of new tokens after a
// cached context (a follow-up turn whose history is in the pool or was fetched), the
// whole step. Against context 0 it shows what attention over the context adds.
void BM_PrefillAfterContext(benchmark::State& state) {
  const DType dtype = DTypeArg(state.range(0));
  const int context = static_cast<int>(state.range(1));
  const int n = static_cast<int>(state.range(2));
  const int threads = static_cast<int>(state.range(3));
  Step step = CpuBlasStep(dtype, threads);
  const model::Model& m = step.model;
  backends::KvArena arena(step.layout, /*populate=*/true);
  std::span<uint8_t* const> blocks = arena.Allocate(context + n);
  std::vector<int32_t> tokens(static_cast<size_t>(context + n));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (i * 131 + 7) % m.config().vocab_size;
  std::vector<float> logits(m.config().vocab_size);
  // The context's K/V computed once, in chunks of 512.
  for (int p = 0; p < context; p += 512) {
    const int len = std::min(512, context - p);
    backends::Batch batch;
    batch.sequences.push_back(backends::SequenceInput{
        std::span<const int32_t>(tokens).subspan(static_cast<size_t>(p), static_cast<size_t>(len)),
        p, blocks, true});
    if (!step.backend->Forward(batch, logits).ok()) std::abort();
  }
  const std::span<const int32_t> chunk =
      std::span<const int32_t>(tokens).subspan(static_cast<size_t>(context));
  for (auto _ : state) {
    backends::Batch batch;
    batch.sequences.push_back(backends::SequenceInput{chunk, context, blocks, true});
    if (!step.backend->Forward(batch, logits).ok()) std::abort();
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(model::DTypeName(dtype)));
}
BENCHMARK(BM_PrefillAfterContext)
    ->ArgsProduct({{0}, {0, 1024, 4096}, {16}, {2}})
    ->Args({0, 3584, 512, 2})
    ->ArgNames({"dtype", "context", "tokens", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvserve::bench

// BENCHMARK_MAIN() with the best OpenBLAS core first (no --blas_reexec here: Google
// Benchmark owns the flags; set OPENBLAS_CORETYPE to pin a core).
int main(int argc, char** argv) {
  kvserve::backends::cpu_blas::EnsureBestBlasCore("kernels_bench", true, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
