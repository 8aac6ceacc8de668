#include "backends/kernels/rope.h"

#include <cmath>
#include <cstddef>

namespace kvserve::backends::kernels {

Rope::Rope(int head_dim, int rope_dim, float base, model::RopeStyle style, float freq_scale,
           std::span<const float> factors)
    : head_dim_(head_dim), rope_dim_(rope_dim), style_(style), inv_freq_(rope_dim / 2) {
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double factor = factors.empty() ? 1.0 : static_cast<double>(factors[i]);
    inv_freq_[i] = static_cast<double>(freq_scale) *
                   std::pow(static_cast<double>(base), -2.0 * i / rope_dim) / factor;
  }
}

void Rope::Apply(std::span<float> x, int pos) const { Apply(x, {}, pos); }

void Rope::Apply(std::span<float> q, std::span<float> k, int pos) const {
  const int half = rope_dim_ / 2;
  for (int i = 0; i < half; ++i) {
    const double theta = static_cast<double>(pos) * inv_freq_[i];
    const float c = static_cast<float>(std::cos(theta));
    const float s = static_cast<float>(std::sin(theta));
    // Index of the two dimensions pair i rotates, within one head.
    const int ia = style_ == model::RopeStyle::kAdjacentPairs ? 2 * i : i;
    const int ib = style_ == model::RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half;
    for (const std::span<float> x : {q, k}) {
      for (size_t head = 0; head + head_dim_ <= x.size(); head += head_dim_) {
        const float a = x[head + ia];
        const float b = x[head + ib];
        x[head + ia] = a * c - b * s;
        x[head + ib] = a * s + b * c;
      }
    }
  }
}

}  // namespace kvserve::backends::kernels
