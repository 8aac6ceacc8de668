#include "backends/kernels/rope.h"

#include <cmath>
#include <cstddef>
#include <vector>

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

namespace {

// cos and sin of theta in double, rounded to float.
void CosSin(double theta, float& c, float& s) {
  c = static_cast<float>(std::cos(theta));
  s = static_cast<float>(std::sin(theta));
}

}  // namespace

void Rope::Apply(std::span<float> q, std::span<float> k, int pos) const {
  std::vector<float> cos(static_cast<size_t>(rope_dim_ / 2));
  std::vector<float> sin(cos.size());
  Angles(pos, cos, sin);
  Apply(q, k, cos, sin);
}

void Rope::Angles(int pos, std::span<float> cos, std::span<float> sin) const {
  for (int i = 0; i < rope_dim_ / 2; ++i) {
    CosSin(static_cast<double>(pos) * inv_freq_[i], cos[i], sin[i]);
  }
}

void Rope::Apply(std::span<float> q, std::span<float> k, std::span<const float> cos,
                 std::span<const float> sin) const {
  const int half = rope_dim_ / 2;
  // Heads outer, pairs inner: the pairs of a head are contiguous and independent, so the
  // compiler vectorizes the inner loops.
  const float* c = cos.data();
  const float* s = sin.data();
  for (const std::span<float> x : {q, k}) {
    for (size_t head = 0; head + head_dim_ <= x.size(); head += head_dim_) {
      if (style_ == model::RopeStyle::kAdjacentPairs) {
        // Pair i: (x[2i], x[2i + 1]).
        float* __restrict h = x.data() + head;
        for (int i = 0; i < half; ++i) {
          const float a = h[2 * i];
          const float b = h[2 * i + 1];
          h[2 * i] = a * c[i] - b * s[i];
          h[2 * i + 1] = a * s[i] + b * c[i];
        }
      } else {
        // Pair i: (x[i], x[i + half]).
        float* __restrict lo = x.data() + head;
        float* __restrict hi = lo + half;
        for (int i = 0; i < half; ++i) {
          const float a = lo[i];
          const float b = hi[i];
          lo[i] = a * c[i] - b * s[i];
          hi[i] = a * s[i] + b * c[i];
        }
      }
    }
  }
}

}  // namespace kvserve::backends::kernels
