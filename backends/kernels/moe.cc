#include "backends/kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "backends/kernels/ops.h"

namespace kvserve::backends::kernels {
namespace {

// The indices of the k largest of `scores`, largest first, the lowest index first among
// equal scores, into ids. k passes over n scores (k = 8 of 128 for Qwen3-30B-A3B: about a
// thousand comparisons, far below one expert's product).
void TopK(std::span<const float> scores, std::span<int32_t> ids) {
  for (size_t j = 0; j < ids.size(); ++j) {
    int32_t best = -1;
    for (size_t e = 0; e < scores.size(); ++e) {
      const bool taken =
          std::find(ids.begin(), ids.begin() + j, static_cast<int32_t>(e)) != ids.begin() + j;
      if (!taken && (best < 0 || scores[e] > scores[best])) best = static_cast<int32_t>(e);
    }
    ids[j] = best;
  }
}

// Group-limited routing: every expert outside the n_groups_used groups of the largest
// score (the sum of the group's two largest s) gets s = -inf.
void MaskGroups(int n_groups, int n_groups_used, std::span<float> s) {
  constexpr int kMaxGroups = 512;  // ModelConfig: n_groups < n_experts <= 512
  const size_t per_group = s.size() / static_cast<size_t>(n_groups);
  float group_score[kMaxGroups];
  for (int g = 0; g < n_groups; ++g) {
    const std::span<const float> group = s.subspan(g * per_group, per_group);
    float first = -std::numeric_limits<float>::infinity(), second = first;
    for (float v : group) {
      if (v > first) {
        second = first;
        first = v;
      } else if (v > second) {
        second = v;
      }
    }
    group_score[g] = first + second;
  }
  int32_t kept[kMaxGroups];
  TopK(std::span<const float>(group_score, static_cast<size_t>(n_groups)),
       std::span<int32_t>(kept, static_cast<size_t>(n_groups_used)));
  for (int g = 0; g < n_groups; ++g) {
    if (std::find(kept, kept + n_groups_used, g) != kept + n_groups_used) continue;
    std::fill_n(s.begin() + g * per_group, per_group, -std::numeric_limits<float>::infinity());
  }
}

}  // namespace

void RouteTopK(const ExpertRouting& routing, std::span<const float> bias, std::span<float> logits,
               std::span<float> selection, std::span<int32_t> ids, std::span<float> weights) {
  if (routing.gating == model::ExpertGating::kSigmoid) {
    for (float& x : logits) x = 1.0f / (1.0f + std::exp(-x));
  } else {
    Softmax(logits);
  }
  std::span<const float> scores = logits;
  if (!bias.empty() || routing.n_groups > 1) {
    for (size_t e = 0; e < logits.size(); ++e) {
      selection[e] = bias.empty() ? logits[e] : logits[e] + bias[e];
    }
    if (routing.n_groups > 1) MaskGroups(routing.n_groups, routing.n_groups_used, selection);
    scores = selection;
  }
  TopK(scores, ids);
  float sum = 0.0f;
  for (size_t j = 0; j < ids.size(); ++j) {
    weights[j] = logits[ids[j]];
    sum += weights[j];
  }
  if (routing.normalize) {
    sum = std::max(sum, kMinExpertWeightSum);
    for (float& w : weights) w /= sum;
  }
  if (routing.scale != 1.0f) {
    for (float& w : weights) w *= routing.scale;
  }
}

}  // namespace kvserve::backends::kernels
