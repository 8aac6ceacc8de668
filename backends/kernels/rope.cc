#include "backends/kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <utility>
#include <vector>

namespace kvserve::backends::kernels {

namespace {

// ggml's ggml_rope_yarn_corr_dims, in float as there: [low, high], the pairs between which
// the angles go from extrapolated (below low) to interpolated (above high).
std::pair<float, float> YarnCorrectionRange(int rope_dim, const RopeYarn& yarn, float base) {
  const auto corr_dim = [&](float turns) {
    return static_cast<float>(rope_dim) *
           std::log(static_cast<float>(yarn.orig_context_length) /
                    (turns * 2.0f * static_cast<float>(std::numbers::pi))) /
           (2.0f * std::log(base));
  };
  const float low = std::floor(corr_dim(yarn.beta_fast));
  const float high = std::ceil(corr_dim(yarn.beta_slow));
  return {std::max(0.0f, low), std::min(static_cast<float>(rope_dim - 1), high)};
}

}  // namespace

Rope::Rope(int head_dim, int rope_dim, float base, model::RopeStyle style, float freq_scale,
           std::span<const float> factors, const RopeYarn& yarn)
    : head_dim_(head_dim),
      rope_dim_(rope_dim),
      style_(style),
      magnitude_(yarn.magnitude),
      inv_freq_(rope_dim / 2) {
  const auto [low, high] = yarn.ext_factor != 0.0f ? YarnCorrectionRange(rope_dim, yarn, base)
                                                   : std::pair<float, float>(0.0f, 0.0f);
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double factor = factors.empty() ? 1.0 : static_cast<double>(factors[i]);
    const double unscaled = std::pow(static_cast<double>(base), -2.0 * i / rope_dim) / factor;
    // m_i, in float as ggml's rope_yarn_ramp (0 without YaRN).
    float mix = 0.0f;
    if (yarn.ext_factor != 0.0f) {
      const float y = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
      mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * yarn.ext_factor;
    }
    inv_freq_[i] = unscaled * (static_cast<double>(freq_scale) * (1.0 - mix) + mix);
  }
}

void Rope::Apply(std::span<float> x, int pos) const { Apply(x, {}, pos); }

namespace {

// cos and sin of theta in double, rounded to float, times `magnitude`.
void CosSin(double theta, float magnitude, float& c, float& s) {
  c = static_cast<float>(std::cos(theta)) * magnitude;
  s = static_cast<float>(std::sin(theta)) * magnitude;
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
    CosSin(static_cast<double>(pos) * inv_freq_[i], magnitude_, cos[i], sin[i]);
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
