#include "backends/kernels/ops.h"

#include <cmath>
#include <cstddef>

namespace kvserve::backends::kernels {

void RmsNorm(std::span<const float> x, std::span<const float> weight, float eps,
             std::span<float> out) {
  double sum_squares = 0.0;
  for (float v : x) sum_squares += static_cast<double>(v) * v;
  const float inv_rms =
      static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(x.size()) + eps));
  for (size_t i = 0; i < x.size(); ++i) out[i] = weight[i] * (x[i] * inv_rms);
}

void Softmax(std::span<float> x) {
  if (x.empty()) return;
  float max_value = x[0];
  for (float v : x) max_value = v > max_value ? v : max_value;
  double sum = 0.0;
  for (float& v : x) {
    v = std::exp(v - max_value);
    sum += v;
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inv_sum;
}

void SwiGlu(std::span<float> gate, std::span<const float> up) {
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = Silu(gate[i]) * up[i];
}

float Dot(std::span<const float> a, std::span<const float> b) {
  float sum = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

void AddInPlace(std::span<float> acc, std::span<const float> x) {
  for (size_t i = 0; i < acc.size(); ++i) acc[i] += x[i];
}

void AddScaled(std::span<float> acc, float a, std::span<const float> x) {
  for (size_t i = 0; i < acc.size(); ++i) acc[i] += a * x[i];
}

int64_t ArgMax(std::span<const float> x) {
  if (x.empty()) return -1;
  int64_t best = 0;
  for (size_t i = 1; i < x.size(); ++i) {
    // `!(x[best] >= x[i])` would pick NaN; this comparison skips it.
    if (x[i] > x[best] || (std::isnan(x[best]) && !std::isnan(x[i]))) {
      best = static_cast<int64_t>(i);
    }
  }
  return best;
}

}  // namespace kvserve::backends::kernels
