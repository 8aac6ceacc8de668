// Mixture-of-experts routing shared by every backend: which experts a token runs and
// with what weights (model::ModelConfig::n_experts states the rule, as llama.cpp's
// build_moe_ffn with softmax gating and normalized weights).
//
// Threading: pure functions; concurrent calls on disjoint outputs are safe.
#ifndef KVSERVE_BACKENDS_KERNELS_MOE_H_
#define KVSERVE_BACKENDS_KERNELS_MOE_H_

#include <cstdint>
#include <span>

namespace kvserve::backends::kernels {

// llama.cpp's floor of the selected probabilities' sum (the smallest normal f16).
inline constexpr float kMinExpertWeightSum = 6.103515625e-5f;

// Routes one token from its router logits [n_experts]:
//   p = softmax(logits) (in place: `logits` holds p on return)
//   ids[j] = the j-th largest p, j in [0, k) (the lowest index first among equal p)
//   weights[j] = p[ids[j]] / max(sum_j p[ids[j]], kMinExpertWeightSum)
// k = ids.size(). Precondition: 1 <= k <= logits.size(), weights.size() == k.
void RouteTopK(std::span<float> logits, std::span<int32_t> ids, std::span<float> weights);

}  // namespace kvserve::backends::kernels

#endif  // KVSERVE_BACKENDS_KERNELS_MOE_H_
