#include "backends/kernels/moe.h"

#include <algorithm>
#include <cstddef>

#include "backends/kernels/ops.h"

namespace kvserve::backends::kernels {

void RouteTopK(std::span<float> logits, std::span<int32_t> ids, std::span<float> weights) {
  Softmax(logits);
  const size_t n = logits.size();
  float sum = 0.0f;
  // k passes over n probabilities (k = 8 of 128 for Qwen3-30B-A3B: about a thousand
  // comparisons, far below one expert's product).
  for (size_t j = 0; j < ids.size(); ++j) {
    int32_t best = -1;
    for (size_t e = 0; e < n; ++e) {
      const bool taken =
          std::find(ids.begin(), ids.begin() + j, static_cast<int32_t>(e)) != ids.begin() + j;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = static_cast<int32_t>(e);
    }
    ids[j] = best;
    weights[j] = logits[best];
    sum += weights[j];
  }
  sum = std::max(sum, kMinExpertWeightSum);
  for (float& w : weights) w /= sum;
}

}  // namespace kvserve::backends::kernels
