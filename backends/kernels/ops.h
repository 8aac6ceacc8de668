// Elementwise and vector kernels shared by every backend: RMSNorm, softmax, SiLU,
// SwiGLU, dot product, residual add, argmax. Scalar, single-threaded, no allocation.
//
// Threading: every function is pure (reads its inputs, writes only its outputs) and may
// be called concurrently on disjoint outputs.
#ifndef KVSERVE_BACKENDS_KERNELS_OPS_H_
#define KVSERVE_BACKENDS_KERNELS_OPS_H_

#include <cmath>
#include <cstdint>
#include <span>

namespace kvserve::backends::kernels {

// out[i] = x[i] * weight[i] / sqrt(mean_j(x[j]^2) + eps)        (RMSNorm)
// x, weight, out: [n]. `out` may alias `x`. The sum of squares is accumulated in double.
// Precondition: the three spans have the same size, n > 0.
void RmsNorm(std::span<const float> x, std::span<const float> weight, float eps,
             std::span<float> out);

// x[i] = exp(x[i] - max(x)) / sum_j exp(x[j] - max(x))          (in place, stable)
// The sum is accumulated in double. An empty span is left as is.
void Softmax(std::span<float> x);

// silu(x) = x * sigmoid(x) = x / (1 + exp(-x))
inline float Silu(float x) { return x / (1.0f + std::exp(-x)); }

// gate[i] = silu(gate[i]) * up[i]                                (SwiGLU, in place on gate)
// gate, up: [ffn_dim]. Precondition: same size.
void SwiGlu(std::span<float> gate, std::span<const float> up);

// sum_i a[i] * b[i], accumulated in float in index order (the order llama2.c uses).
// Precondition: same size.
float Dot(std::span<const float> a, std::span<const float> b);

// acc[i] += x[i]                                                  (residual connection)
void AddInPlace(std::span<float> acc, std::span<const float> x);

// acc[i] += a * x[i]                                              (weighted residual add)
// Precondition: same size.
void AddScaled(std::span<float> acc, float a, std::span<const float> x);

// Index of the largest element; the lowest index wins ties. -1 for an empty span.
// NaN elements are never chosen unless every element is NaN (then 0).
int64_t ArgMax(std::span<const float> x);

}  // namespace kvserve::backends::kernels

#endif  // KVSERVE_BACKENDS_KERNELS_OPS_H_
