// Rotary position embedding (RoPE), both pairings of model::RopeStyle.
#ifndef KVSERVE_BACKENDS_KERNELS_ROPE_H_
#define KVSERVE_BACKENDS_KERNELS_ROPE_H_

#include <span>
#include <vector>

#include "model/model_config.h"

namespace kvserve::backends::kernels {

// YaRN's part of RoPE (ggml's rope_yarn and ggml_rope_yarn_corr_dims), and the magnitude
// that multiplies every cos and sin (model::ModelConfig::RopeMagnitude()).
struct RopeYarn {
  float ext_factor = 0.0f;  // 0 = no YaRN: every pair takes the scaled angle
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int orig_context_length = 0;  // > 0 when ext_factor > 0
  float magnitude = 1.0f;
};

// Rotates the first `rope_dim` dimensions of every head by position-dependent angles:
//   for pair i in [0, rope_dim / 2), d = rope_dim:
//     w_i = base^(-2i / d) / factor_i
//     theta_i(pos) = pos * w_i * (freq_scale * (1 - m_i) + m_i)
// (freq_scale: linear or YaRN RoPE scaling, 1 by default; factor_i: Llama 3.x's rope_freqs,
// 1 when no factors are given; m_i = 0 without YaRN, as llama.cpp's ggml_rope_ext applies
// them). With YaRN, m_i = ext_factor * ramp_i, the share of pair i that keeps its unscaled
// angle (extrapolates):
//     ramp_i = 1 - clamp((i - low) / max(0.001, high - low), 0, 1)
//     low  = max(0,     floor(C(beta_fast))),  high = min(d - 1, ceil(C(beta_slow))),
//     C(b) = d * ln(orig_context_length / (2 pi b)) / (2 ln base)
// (C(b): the pair whose wavelength fits b times into the original context; low and high in
// float, as ggml computes them).
//   kAdjacentPairs rotates (x[2i], x[2i+1]);  kRotateHalves rotates (x[i], x[i + rope_dim/2]):
//     (a, b) -> (a cos theta - b sin theta,  a sin theta + b cos theta) * magnitude
// Dimensions [rope_dim, head_dim) of each head are left unchanged.
// The per-pair frequencies are precomputed (in double); angles, cos and sin are computed
// in double per call and applied in float, so the result does not depend on how many
// positions were rotated before (prefill and decode rotate a position identically).
//
// Invariants: 0 < rope_dim <= head_dim, rope_dim even (ModelConfig::Validate checks this).
// Threading: immutable after construction; Apply may run concurrently on disjoint data.
class Rope {
 public:
  // `factors`: empty or [rope_dim / 2] positive numbers.
  Rope(int head_dim, int rope_dim, float base, model::RopeStyle style, float freq_scale = 1.0f,
       std::span<const float> factors = {}, const RopeYarn& yarn = {});
  // With latent attention (config.mla()) the rotated parts sit at the end of each query
  // head and of the cached row, so the rope is one head of rope_dim: callers pass exactly
  // those slices (kernels/mla.h).
  static Rope ForModel(const model::ModelConfig& config) {
    return Rope(config.mla() ? config.rope_dim : config.head_dim, config.rope_dim, config.rope_base,
                config.rope_style, config.rope_freq_scale, config.rope_freq_factors,
                RopeYarn{.ext_factor = config.yarn_ext_factor,
                         .beta_fast = config.yarn_beta_fast,
                         .beta_slow = config.yarn_beta_slow,
                         .orig_context_length = config.YarnOrigContextLength(),
                         .magnitude = config.RopeMagnitude()});
  }

  // Rotates x in place: x is [n_heads, head_dim] (n_heads = x.size() / head_dim), every
  // head at the same absolute position `pos` (>= 0).
  // Precondition: x.size() is a multiple of head_dim.
  void Apply(std::span<float> x, int pos) const;
  // Apply(q, pos) and Apply(k, pos) with one cos and sin per pair for both (a token's
  // queries and keys; a decode step spends about 2 % of its time on them otherwise).
  void Apply(std::span<float> q, std::span<float> k, int pos) const;

  // The cos and sin of pair i's angle at `pos`, times the magnitude (cos[i], sin[i] for
  // i < rope_dim / 2), as Apply computes them: a backend that rotates the same position in every
  // layer computes them once. Precondition: cos.size() and sin.size() >= rope_dim / 2.
  void Angles(int pos, std::span<float> cos, std::span<float> sin) const;
  // Apply(q, k, pos) with the angles of `pos` from Angles: the same results.
  // Precondition: cos and sin do not overlap q or k.
  void Apply(std::span<float> q, std::span<float> k, std::span<const float> cos,
             std::span<const float> sin) const;

  int head_dim() const { return head_dim_; }
  int rope_dim() const { return rope_dim_; }

 private:
  int head_dim_;
  int rope_dim_;
  model::RopeStyle style_;
  float magnitude_;
  std::vector<double> inv_freq_;  // [rope_dim / 2]: theta_i(1)
};

}  // namespace kvserve::backends::kernels

#endif  // KVSERVE_BACKENDS_KERNELS_ROPE_H_
