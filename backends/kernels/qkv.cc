#include "backends/kernels/qkv.h"

#include <cstddef>

#include "backends/kernels/matvec.h"
#include "backends/kernels/ops.h"

namespace kvserve::backends::kernels {
namespace {

// Each [head_dim] slice of x = RMSNorm(slice) * gain, in place.
void RmsNormHeads(std::span<float> x, std::span<const float> gain, float eps) {
  const size_t hd = gain.size();
  for (size_t h = 0; h + hd <= x.size(); h += hd) {
    const std::span<float> head = x.subspan(h, hd);
    RmsNorm(head, gain, eps, head);
  }
}

// Biases and per-head norms: PrepareQkv before RoPE.
void BiasAndNorm(const model::ModelConfig& config, const model::LayerWeights& layer,
                 std::span<float> q, std::span<float> k, std::span<float> v) {
  if (config.attention_qkv_bias) {
    AddInPlace(q, F32Values(layer.bq));
    AddInPlace(k, F32Values(layer.bk));
    AddInPlace(v, F32Values(layer.bv));
  }
  if (config.qk_norm) {
    RmsNormHeads(q, F32Values(layer.q_norm), config.rms_eps);
    RmsNormHeads(k, F32Values(layer.k_norm), config.rms_eps);
  }
}

}  // namespace

void PrepareQkv(const model::ModelConfig& config, const model::LayerWeights& layer,
                const Rope& rope, int pos, std::span<float> q, std::span<float> k,
                std::span<float> v) {
  BiasAndNorm(config, layer, q, k, v);
  rope.Apply(q, k, pos);
}

void PrepareQkv(const model::ModelConfig& config, const model::LayerWeights& layer,
                const Rope& rope, std::span<const float> cos, std::span<const float> sin,
                std::span<float> q, std::span<float> k, std::span<float> v) {
  BiasAndNorm(config, layer, q, k, v);
  rope.Apply(q, k, cos, sin);
}

void AddOutputBias(const model::ModelConfig& config, const model::LayerWeights& layer,
                   std::span<float> out) {
  if (config.attention_output_bias) AddInPlace(out, F32Values(layer.bo));
}

}  // namespace kvserve::backends::kernels
