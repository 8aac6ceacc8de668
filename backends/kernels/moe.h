// Mixture-of-experts routing shared by every backend: which experts a token runs and
// with what weights (model::ModelConfig::n_experts states the rule, as llama.cpp's
// build_moe_ffn).
//
// Threading: pure functions; concurrent calls on disjoint outputs are safe.
#ifndef KVSERVE_BACKENDS_KERNELS_MOE_H_
#define KVSERVE_BACKENDS_KERNELS_MOE_H_

#include <cstdint>
#include <span>

#include "model/model_config.h"

namespace kvserve::backends::kernels {

// llama.cpp's floor of the selected probabilities' sum (the smallest normal f16).
inline constexpr float kMinExpertWeightSum = 6.103515625e-5f;

// The routing rule of a model's mixture-of-experts layers (model::ModelConfig's fields of
// the same meaning). The defaults are qwen3moe's: softmax, normalized weights, no groups.
struct ExpertRouting {
  model::ExpertGating gating = model::ExpertGating::kSoftmax;
  bool normalize = true;
  float scale = 1.0f;
  int n_groups = 0;  // > 1: group-limited routing
  int n_groups_used = 0;

  static ExpertRouting ForModel(const model::ModelConfig& c) {
    return {c.expert_gating, c.expert_weights_norm, c.expert_weights_scale, c.n_expert_groups,
            c.n_expert_groups_used};
  }
};

// Routes one token from its router logits [n_experts] (n = logits.size(), k = ids.size()):
//   p = softmax(logits) or sigmoid(logits) (in place: `logits` holds p on return)
//   s = p + bias (bias.size() == n), or p when `bias` is empty
//   n_groups > 1: the n / n_groups consecutive experts of a group score the sum of their
//     two largest s; experts outside the n_groups_used best groups (lowest index first
//     among equal scores) are not selected
//   ids[j] = the expert of the j-th largest s, j in [0, k) (the lowest index first among
//     equal s)
//   weights[j] = p[ids[j]], divided by max(sum_j p[ids[j]], kMinExpertWeightSum) when
//     normalize, then times scale (when not 1)
// `selection` holds s: [n] floats of scratch, needed when `bias` is not empty or
// n_groups > 1 (else it may be empty). Preconditions: 1 <= k <= the experts of the
// allowed groups, weights.size() == k, the group counts valid (ModelConfig::Validate).
void RouteTopK(const ExpertRouting& routing, std::span<const float> bias, std::span<float> logits,
               std::span<float> selection, std::span<int32_t> ids, std::span<float> weights);

}  // namespace kvserve::backends::kernels

#endif  // KVSERVE_BACKENDS_KERNELS_MOE_H_
