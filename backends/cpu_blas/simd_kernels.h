// Vectorised inner kernels of the cpu_blas backend, one set per instruction-set level,
// chosen at run time from the CPU's features (never from the build host's: the code is
// compiled with per-function target attributes, without -march).
//
// Every kernel computes the same mathematical result as the scalar oracles in
// backends/kernels/ (16-bit weights are converted exactly to f32); only the summation
// order differs (several vector lanes and accumulators), so results agree to float
// rounding, not bit for bit.
//
// Threading: every function is pure; concurrent calls on disjoint outputs are safe.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_SIMD_KERNELS_H_
#define KVSERVE_BACKENDS_CPU_BLAS_SIMD_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/dtype.h"

namespace kvserve::backends::cpu_blas {

// Instruction-set levels, the x86-64 ones then the AArch64 ones, each group in the order
// BestIsa prefers them (the later, the better). Every x86-64 level needs kAvx2's features
// and every AArch64 level kNeon's, and each AVX-512 level those of the one before it; but
// kAvxVnni is a side branch: Alder Lake has AVX-VNNI and no AVX-512, Zen 4 AVX-512 VNNI
// and no AVX-VNNI. So a CPU supports scalar and some subset of one group, not always a
// prefix of it: ask IsaSupported of each level; the order only ranks them.
enum class Isa : uint8_t {
  kScalar,  // portable C++
  kAvx2,    // AVX2 + FMA + F16C
  // The AVX2 level + AVX-VNNI: the quantized-weight products use the 256-bit VEX vpdpbusd
  // (one instruction for vpmaddubsw + vpmaddwd + vpaddd); the float kernels are kAvx2's.
  // Below the AVX-512 levels: a CPU with both (Sapphire Rapids, Zen 5) takes those.
  kAvxVnni,
  kAvx512,  // AVX-512 F (+ the AVX2 level; not AVX-VNNI)
  // AVX-512 F + BW + VL + VNNI: the AVX-512 level whose quantized-weight products use
  // vpdpbusd (one instruction for vpmaddubsw + vpmaddwd + vpaddd).
  kAvx512Vnni,
  // The AVX-512 VNNI level + AVX512_BF16: bf16 weights multiply activations rounded to
  // bf16 with vdpbf16ps (KernelSet::matmul_bf16_dot).
  kAvx512Bf16,
  // AArch64 Advanced SIMD (every AArch64 CPU): 4 float lanes; the quantized products
  // multiply bytes with smull / smlal and sum pairs with sadalp.
  kNeon,
  // The NEON level + the dot-product extension (FEAT_DotProd, Armv8.2 optional, 8.4
  // mandatory): quantized products with sdot (4 byte products into each int32 lane).
  kNeonDotprod,
  // The dotprod level + the int8 matrix multiply (FEAT_I8MM, Armv8.6): batched quantized
  // products of 2 weight rows with 2 activation rows by smmla (a 2x8 by 8x2 int8 product).
  kNeonI8mm,
};

// Every level, in the enum's order (for tests, for naming levels and for BestIsa).
inline constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2,        Isa::kAvxVnni,
                                   Isa::kAvx512, Isa::kAvx512Vnni,  Isa::kAvx512Bf16,
                                   Isa::kNeon,   Isa::kNeonDotprod, Isa::kNeonI8mm};

std::string_view IsaName(Isa isa);

// True when this CPU (and OS) can run kernels of level `isa`. kScalar is always true.
bool IsaSupported(Isa isa);

// The best level this CPU supports: the last of kAllIsas that IsaSupported.
Isa BestIsa();

// Whether the quantized panel kernels (KernelSet::matmul_q4_0_panels, ...) prefetch a
// batch-1 product's weights into L2 (true) or L1 (false): false on AMD CPUs, true on the
// others (measured faster on Intel Emerald Rapids, slower on AMD Zen 5; other CPUs follow
// their vendor's, unmeasured). Read from CPUID once.
bool Batch1PrefetchIntoL2();

// y[i * ldy + r] = sum_c W[r, c] * x[i * ldx + c]
//     for r in [row_begin, row_end), i in [0, n), c in [0, cols)
// W: [rows, cols] row-major, element type per kernel (f32, f16 or bf16 bits).
// x: n rows of `cols` floats, row stride ldx; y: n rows, row stride ldy.
// Each weight row is read once from memory for all n activation rows, so a batched
// decode step streams the weights once. Precondition: y does not alias W or x.
template <typename WeightT>
using MatMulFn = void (*)(const WeightT* w, int64_t cols, int64_t row_begin, int64_t row_end,
                          const float* x, int64_t ldx, int n, float* y, int64_t ldy);

// y[i * ldy + r] = W[r, :] · X[i, :]   for r in [row_begin, row_end), i in [0, n)
// with W quantized (ggml block layout, `row_bytes` per row of `cols` elements) and X
// quantized to the activation format of W's type (q8_activations.h; row i at
// xq + i * ldxq bytes). Each weight row is read once for all n activation rows.
// Results equal the scalar DotQ* functions up to float summation order.
using QMatMulFn = void (*)(const uint8_t* w, int64_t row_bytes, int64_t cols, int64_t row_begin,
                           int64_t row_end, const void* xq, int64_t ldxq, int n, float* y,
                           int64_t ldy);

// A QMatMulFn over a panel layout that may first unpack the weights it reads into
// `scratch` (scratch_bytes; see kQuantUnpackScratchBytes; the contents on entry do not
// matter and are left undefined).
using QMatMulUnpackFn = void (*)(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                 int64_t row_begin, int64_t row_end, const void* xq, int64_t ldxq,
                                 int n, float* y, int64_t ldy, uint8_t* scratch,
                                 int64_t scratch_bytes);
// The scratch a QMatMulUnpackFn is tuned for: a slab of panels that stays in L2 while
// every pass over the activation rows reads it. A scratch too small for one unpacked
// panel (cols / 256 blocks of kUnpackedQ6_KBlockBytes) leaves the weights packed.
inline constexpr int64_t kQuantUnpackScratchBytes = 256 * 1024;
// The parts of a q6_K panel block (16 rows x 256 columns; model/panels.h,
// kQ6_KPanelBlockBytes) and of its unpacked form (KernelSet::matmul_q6_k_panels_unpacked),
// in this order: the rows' f16 d; the codes (packed: 32 lines of low 4 bits, then 16 of
// high 2 bits; unpacked: 64 lines of one-byte codes, line c holding columns 4c .. 4c + 3 as
// a packed line does); 4 lines of int8 scales.
struct Q6_KPanelParts {
  static constexpr int64_t kHeaderBytes = 32;
  static constexpr int64_t kPackedCodeBytes = 48 * 64;
  static constexpr int64_t kUnpackedCodeBytes = 64 * 64;
  static constexpr int64_t kTrailerBytes = 4 * 64;
};
inline constexpr int64_t kUnpackedQ6_KBlockBytes = Q6_KPanelParts::kHeaderBytes +
                                                   Q6_KPanelParts::kUnpackedCodeBytes +
                                                   Q6_KPanelParts::kTrailerBytes;

// Row stride, in elements, that bf16 activations for KernelSet::matmul_bf16_dot need at
// least: `cols` rounded up to the kernel's 32-element step.
constexpr int64_t Bf16DotStride(int64_t cols) { return (cols + 31) / 32 * 32; }

// y[i * ldy + r] = sum_c W[r, c] * XB[i, c]
//     for r in [row_begin, row_end), i in [0, n), c in [0, cols)
// W: [rows, cols] bf16 bits, row-major. XB: n rows of bf16 bits at xb + i * ldxb, with
// ldxb >= Bf16DotStride(cols) and elements [cols, Bf16DotStride(cols)) of each row zero
// (as KernelSet::round_bf16 writes them). Precondition: y does not alias W or xb.
using MatMulBf16DotFn = void (*)(const uint16_t* w, int64_t cols, int64_t row_begin,
                                 int64_t row_end, const uint16_t* xb, int64_t ldxb, int n, float* y,
                                 int64_t ldy);

// The kernels of one level. Obtain with KernelsFor(); the struct is immutable.
struct KernelSet {
  Isa isa;
  MatMulFn<float> matmul_f32;
  MatMulFn<uint16_t> matmul_f16;
  MatMulFn<uint16_t> matmul_bf16;
  QMatMulFn matmul_q8_0;  // activations: Q8Block rows
  QMatMulFn matmul_q4_0;  // activations: Q8Block rows
  QMatMulFn matmul_q5_0;  // activations: Q8Block rows
  QMatMulFn matmul_q5_1;  // activations: Q8Block rows
  QMatMulFn matmul_q4_k;  // activations: Q8KBlock rows
  QMatMulFn matmul_q5_k;  // activations: Q8KBlock rows
  QMatMulFn matmul_q6_k;  // activations: Q8KBlock rows
  // Attention over `count` cached rows of one head (K or V rows of a KV block), row t at
  // rows + t * stride bytes, `hd` elements each, as f32 or f16 bits (an f32 row starts
  // on a 4-byte boundary), for nq queries that read the same rows (the query heads of a
  // KV head, the rows of a prefill chunk that see the same positions):
  //   dot_rows:  out[j][t] = scale * sum_i q[j][i] * row_t[i]    for j < nq, t < count
  //   axpy_rows: y[j][i] += sum_t a[j][t] * row_t[i]             for j < nq, i < hd
  // Several rows per pass, with the accumulators in registers, instead of one call per
  // position: decode attention at long contexts is otherwise bound by call and reduction
  // overhead, not by reading the cache. Several queries per pass load (and widen) each
  // row vector once for all of them: a prefill chunk's attention is otherwise bound by
  // those loads. Each query's results are the same bits whatever nq and whichever queries
  // share the call (batch invariance).
  void (*dot_rows_f32)(const float* const* q, float* const* out, int nq, const void* rows,
                       size_t stride, int count, int hd, float scale);
  void (*dot_rows_f16)(const float* const* q, float* const* out, int nq, const void* rows,
                       size_t stride, int count, int hd, float scale);
  void (*axpy_rows_f32)(const float* const* a, float* const* y, int nq, const void* rows,
                        size_t stride, int count, int hd);
  void (*axpy_rows_f16)(const float* const* a, float* const* y, int nq, const void* rows,
                        size_t stride, int count, int hd);
  // out[i] = float(in[i]) for f16 or bf16 bits.
  void (*f16_to_f32)(const uint16_t* in, float* out, int64_t n);
  void (*bf16_to_f32)(const uint16_t* in, float* out, int64_t n);
  // out[i] = model::FloatToHalf(in[i]) (nearest even; overflow to inf, underflow through
  // f16 subnormals to zero); the vector levels keep a NaN's payload bits where
  // FloatToHalf writes its one quiet NaN. Writes K/V rows into an f16 cache: at batch 16
  // the scalar loop took 1.1 ms of an s110m bf16 decode step of about 9.5 ms.
  void (*f32_to_f16)(const float* in, uint16_t* out, int64_t n);
  // The elementwise functions of the scalar oracles (backends/kernels/ops.h), in place:
  //   softmax: x[i] = exp(x[i] - max x) / sum_j exp(x[j] - max x)   for i in [0, n)
  //   swiglu:  gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g))
  // The vector levels evaluate exp with a polynomial (ExpApprox in simd_kernels_inl.h:
  // within a few float roundings of std::exp on [-87.33, 88], 0 below, exp(88) above;
  // NaN stays NaN) and sum in float, so results agree with the oracles to float rounding.
  void (*softmax)(float* x, int64_t n);
  void (*swiglu)(float* gate, const float* up, int64_t n);
  //   rms_norm: out[i] = w[i] * (x[i] * inv_rms), inv_rms = 1 / sqrt(sum x^2 / n + eps)
  //             (kernels::RmsNorm; the vector levels sum the squares in float, in several
  //             chains, against the oracle's one chain in double; out may alias x).
  // A decode step normalizes 2 rows per layer on the calling thread while the others
  // wait: the scalar loop takes 1-2 us per 768 elements (one chain of dependent double
  // additions).
  void (*rms_norm)(const float* x, const float* w, int64_t n, float eps, float* out);
  // cpu_blas::QuantizeActivations (q8_activations.h): the same bytes (both round x / d to
  // nearest, ties to even, and clamp to [-127, 127]), with the vector levels' max, round,
  // convert and sum. Runs once per product on the calling thread while the others wait,
  // so at batch 1 the scalar loop is a visible share of a small model's decode step; the
  // vector levels cut it severalfold (bench/kernels_bench.cc BM_QuantizeActivations).
  void (*quantize_activations)(model::DType weights, const float* x, int64_t cols, void* out);
  // The quantized products again, with X in the interleaved layout
  // (q8_activations.h, QuantizeActivationsInterleaved): each decoded weight block is
  // transposed the same way once, and then every activation row sums eight 32-element
  // blocks per instruction chain. For batches: the transpose costs about as much as two
  // rows. nullptr on levels without them (scalar, the NEON levels). Precondition: cols % 256 == 0.
  QMatMulFn matmul_q8_0_il = nullptr;  // activations: Q8x8Block rows
  QMatMulFn matmul_q4_0_il = nullptr;  // activations: Q8x8Block rows
  QMatMulFn matmul_q5_0_il = nullptr;  // activations: Q8x8Block rows
  QMatMulFn matmul_q5_1_il = nullptr;  // activations: Q8x8Block rows
  QMatMulFn matmul_q4_k_il = nullptr;  // activations: Q8KBlock rows, q interleaved
  QMatMulFn matmul_q5_k_il = nullptr;  // activations: Q8KBlock rows, q interleaved
  QMatMulFn matmul_q6_k_il = nullptr;  // activations: Q8KBlock rows, q interleaved
  // bf16 weights against the activations rounded to bf16 (to nearest, ties to even, by
  // round_bf16): not the exact product of matmul_bf16 but the bf16 product the CPU's
  // dot-product instruction computes (vdpbf16ps), as llama.cpp does for bf16 weights.
  // Each element of x moves by at most 2^-8 of itself, so y moves by at most
  // 2^-8 sum |w x| plus float rounding. Any cols. The activations are rounded once per
  // product by the caller (gemm.cc), not once per slice of rows. nullptr below
  // avx512bf16 and on the NEON levels.
  MatMulBf16DotFn matmul_bf16_dot = nullptr;
  // out[c] = bf16(x[c]) (to nearest, ties to even) for c in [0, cols), 0 for c in
  // [cols, Bf16DotStride(cols)): one activation row for matmul_bf16_dot. nullptr
  // where matmul_bf16_dot is.
  void (*round_bf16)(const float* x, int64_t cols, uint16_t* out) = nullptr;
  // matmul_bf16_dot with W in the panel layout (model/panels.h) instead of
  // row-major, `w` its first element (64-byte aligned for speed, not required): the same
  // products (the same rounding of x), summed in another order. Precondition in
  // addition: row_begin and row_end multiples of model::kPanelRows; cols even.
  // nullptr where matmul_bf16_dot is.
  MatMulBf16DotFn matmul_bf16_panels = nullptr;
  // matmul_bf16_panels with two f32 FMAs per bf16 pair instead of one vdpbf16ps: the
  // panel lines widened to f32, x as floats holding the bf16-rounded activations (what
  // KernelSet::round_bf16 writes, widened; row stride ldx >= cols). Each step is
  // vdpbf16ps as Intel defines it (odd pair first, nearest even, denormals as zero), so
  // where the CPU's vdpbf16ps follows that definition the results equal
  // matmul_bf16_panels' bit for bit (bf16_products.h checks it before choosing). For CPUs
  // whose vdpbf16ps issues at a quarter of the FMA's rate. Same preconditions as
  // matmul_bf16_panels. nullptr where matmul_bf16_panels is.
  MatMulFn<uint16_t> matmul_bf16_panels_fma = nullptr;
  // matmul_f32 with W in the f32 panel layout (model/panels.h) instead of row-major, `w`
  // its first element: the exact f32 products, each output one chain of multiply-adds over
  // the columns in order (so it does not depend on n). For every row count (6 activation
  // rows per pass over the weights at avx2, 8 from avx512). Precondition in addition:
  // row_begin and row_end multiples of model::kPanelRows. The same bits at every level that
  // has it (avx2 and up: 512-bit lines, or each line as two 256-bit halves); nullptr at the
  // scalar and NEON levels.
  MatMulFn<float> matmul_f32_panels = nullptr;
  // matmul_bf16 with W in the bf16 panel layout (model/panels.h) instead of row-major: the
  // exact f32 products of the bf16 weights and the float activations (x as matmul_bf16
  // takes it, not rounded), each output one chain of FMAs over the columns in order; so
  // bit for bit what matmul_f32_panels gives on the weights widened to f32, at every
  // level. For the levels without vdpbf16ps (and bf16_dot off): bf16 weights take the
  // panel layout there too. Precondition in addition: row_begin and row_end multiples of
  // model::kPanelRows; cols even. Where matmul_f32_panels is.
  MatMulFn<uint16_t> matmul_bf16_panels_exact = nullptr;
  // matmul_q4_0 (matmul_q8_0) with W in the q4_0 (q8_0) panel layout (model/panels.h)
  // instead of row-major, `w` its first byte and row_bytes that of a row-major row: the
  // same integer block products against Q8Block activation rows, summed in another
  // order. For every row count (8 activation rows per pass over the weights).
  // Precondition in addition: row_begin and row_end multiples of model::kPanelRows.
  // 256-bit (3 rows per pass; vpmaddubsw on avx2 and avx512, vpdpbusd on avx_vnni),
  // 512-bit (vpdpbusd) from avx512vnni, with the same results; nullptr at the scalar and
  // NEON levels.
  QMatMulFn matmul_q4_0_panels = nullptr;
  QMatMulFn matmul_q8_0_panels = nullptr;
  // The same for q4_K and q6_K weights (Q8KBlock activation rows; the integer sub-block
  // products of matmul_q4_k / matmul_q6_k, summed in another order); the same levels.
  QMatMulFn matmul_q4_k_panels = nullptr;
  QMatMulFn matmul_q6_k_panels = nullptr;
  // matmul_q6_k_panels for many activation rows: each slab of panels is unpacked once
  // into `scratch` (codes one byte each) and every pass over the rows reads the unpacked
  // codes, with bit for bit the same results (unpacking the 6-bit codes in every pass
  // cost a third of the 256-bit kernels' time). The levels with panels; nullptr below
  // (and none for q4_K, whose nibbles unpack in one or two operations).
  QMatMulUnpackFn matmul_q6_k_panels_unpacked = nullptr;
};

// The kernel set of `isa`. Precondition: IsaSupported(isa) (calling a kernel of an
// unsupported level faults with an illegal instruction).
const KernelSet& KernelsFor(Isa isa);

// Per-level sets, defined in simd_scalar.cc, simd_avx2.cc, simd_avx_vnni.cc, simd_avx512.cc,
// simd_avx512_vnni.cc, simd_avx512_bf16.cc (built for x86-64 only), simd_neon.cc,
// simd_neon_dotprod.cc and simd_neon_i8mm.cc (built for AArch64 only).
const KernelSet& ScalarKernels();
const KernelSet& Avx2Kernels();
const KernelSet& AvxVnniKernels();
const KernelSet& Avx512Kernels();
const KernelSet& Avx512VnniKernels();
const KernelSet& Avx512Bf16Kernels();
const KernelSet& NeonKernels();
const KernelSet& NeonDotprodKernels();
const KernelSet& NeonI8mmKernels();

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_SIMD_KERNELS_H_
