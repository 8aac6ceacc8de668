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

namespace {

// cos and sin of theta in double, rounded to float.
void CosSin(double theta, float& c, float& s) {
  c = static_cast<float>(std::cos(theta));
  s = static_cast<float>(std::sin(theta));
}

}  // namespace

template <typename AngleFn>
void Rope::Rotate(std::span<float> q, std::span<float> k, AngleFn angle) const {
  const int half = rope_dim_ / 2;
  for (int i = 0; i < half; ++i) {
    float c;
    float s;
    angle(i, c, s);
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

void Rope::Apply(std::span<float> q, std::span<float> k, int pos) const {
  Rotate(q, k,
         [&](int i, float& c, float& s) { CosSin(static_cast<double>(pos) * inv_freq_[i], c, s); });
}

void Rope::Angles(int pos, std::span<float> cos, std::span<float> sin) const {
  for (int i = 0; i < rope_dim_ / 2; ++i) {
    CosSin(static_cast<double>(pos) * inv_freq_[i], cos[i], sin[i]);
  }
}

void Rope::Apply(std::span<float> q, std::span<float> k, std::span<const float> cos,
                 std::span<const float> sin) const {
  Rotate(q, k, [&](int i, float& c, float& s) {
    c = cos[i];
    s = sin[i];
  });
}

}  // namespace kvserve::backends::kernels
