// Activation rows quantized to int8 for products with quantized weights, as llama.cpp
// does (its vec_dot_type): q8_0, q4_0, q5_0 and q5_1 weights meet Q8Block rows (32
// elements per block; llama.cpp gives q5_1 its q8_1, whose d * sum is our d and sum),
// q4_K, q5_K and q6_K weights meet Q8KBlock rows (256 per block). The weight-times-
// activation products then run in integer arithmetic, one float multiply per block.
//
// Error: each activation element is off by at most d / 2 (d = its block's max|x| / 127),
// so a dot product with weights w differs from the float product by at most
// sum_blocks d_b / 2 * sum_{j in b} |w_j| (plus float rounding), about 0.4 % of
// sum |w x| for typical rows. Tests use this bound (ActivationErrorBound).
//
// Threading: pure functions.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_Q8_ACTIVATIONS_H_
#define KVSERVE_BACKENDS_CPU_BLAS_Q8_ACTIVATIONS_H_

#include <cstddef>
#include <cstdint>

#include "model/dtype.h"

namespace kvserve::backends::cpu_blas {

// Whether products with `weights` quantize activations per 32 (Q8Block, Q8x8Block): the
// 32-element formats q8_0, q4_0, q5_0 and q5_1. The other quantized types use Q8KBlock.
inline constexpr bool UsesQ8Blocks(model::DType weights) {
  return weights == model::DType::kQ8_0 || weights == model::DType::kQ4_0 ||
         weights == model::DType::kQ5_0 || weights == model::DType::kQ5_1;
}

// 32 activations: x[j] ~ d * q[j], q in [-127, 127]; sum = sum_j q[j].
struct Q8Block {
  float d;
  int32_t sum;
  int8_t q[32];
};
static_assert(sizeof(Q8Block) == 40);

// 256 activations: x[j] ~ d * q[j], q in [-127, 127]; bsums[g] = sum of q[16g .. 16g + 15].
struct Q8KBlock {
  float d;
  int16_t bsums[16];
  int8_t q[256];
};
static_assert(sizeof(Q8KBlock) == 292);

// The interleaved layout, for the vector levels' batched products (KernelSet::
// matmul_*_il), when cols % 256 == 0. Every 256 activations are quantized exactly as in
// the layouts above (per 32 for the UsesQ8Blocks weights, per 256 for the k-quants); only their
// 256 codes are stored as the 8 x 8 transpose of 4-byte words: byte 32k + 4v + j holds
// element 32v + 4k + j (v, k < 8; j < 4). A 32-byte vector then holds word k of each of
// the eight 32-element (sub-)blocks, one per 32-bit lane, so one accumulator sums eight
// blocks separately and their scales apply once per lane instead of once per block.
// UsesQ8Blocks weights meet Q8x8Block rows, the k-quants Q8KBlock rows with q interleaved.
struct Q8x8Block {
  float d[8];      // d of 32-element block v
  int32_t sum[8];  // sum of block v's codes
  int8_t q[256];   // interleaved
};
static_assert(sizeof(Q8x8Block) == 320);

// Bytes per row of `cols` activations in the interleaved layout of `weights` (quantized).
// Precondition: cols % 256 == 0.
size_t Q8RowBytesInterleaved(model::DType weights, int64_t cols);

// As QuantizeActivations, in the interleaved layout. Precondition: cols % 256 == 0,
// weights quantized, x finite; `out` aligned for Q8x8Block / Q8KBlock.
void QuantizeActivationsInterleaved(model::DType weights, const float* x, int64_t cols, void* out);

// Rewrites in place a row of `cols` activations quantized for `weights` in the natural
// layout (by QuantizeActivations or KernelSet::quantize_activations, which write the same
// bytes) into the interleaved layout; both take the same bytes when cols % 256 == 0.
// QuantizeActivationsInterleaved is QuantizeActivations followed by this. Precondition:
// as QuantizeActivationsInterleaved.
void InterleaveActivations(model::DType weights, int64_t cols, void* row);

// The activation format products with `weights` use, as bytes per row of `cols`
// activations: cols / 32 * sizeof(Q8Block) for UsesQ8Blocks types, cols / 256 *
// sizeof(Q8KBlock) for q4_K, q5_K and q6_K, 0 for the float types (no quantization).
// Precondition: cols is a multiple of DTypeBlockElems(weights).
size_t Q8RowBytes(model::DType weights, int64_t cols);

// Quantizes `cols` floats x into the activation format of `weights` at `out`
// (Q8RowBytes(weights, cols) bytes, aligned for Q8Block / Q8KBlock): per block
// d = max|x| / 127, q = round(x / d) (ties to even). Precondition: as Q8RowBytes,
// weights is quantized, x finite.
void QuantizeActivations(model::DType weights, const float* x, int64_t cols, void* out);

// Scalar products of one weight row (`cols` elements, ggml block layout) with one
// quantized activation row: the portable kernels and the definition the vector levels
// compute (up to float summation order).
float DotQ8_0(const uint8_t* w, const Q8Block* x, int64_t cols);
float DotQ4_0(const uint8_t* w, const Q8Block* x, int64_t cols);
float DotQ5_0(const uint8_t* w, const Q8Block* x, int64_t cols);
float DotQ5_1(const uint8_t* w, const Q8Block* x, int64_t cols);
float DotQ4_K(const uint8_t* w, const Q8KBlock* x, int64_t cols);
float DotQ5_K(const uint8_t* w, const Q8KBlock* x, int64_t cols);
float DotQ6_K(const uint8_t* w, const Q8KBlock* x, int64_t cols);

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_Q8_ACTIVATIONS_H_
