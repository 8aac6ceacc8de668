#include "backends/testing/textbook_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/kernels/matvec.h"

namespace kvserve::backends::testing {
namespace {

using Matrix = std::vector<double>;  // row-major

// A weight tensor dequantised to double, [rows, cols] (kernels::RowToFloat converts each
// element exactly as model/dtype.h defines it; nothing else is shared with the backends).
struct Dense {
  int64_t rows = 0, cols = 0;
  std::vector<double> w;  // empty for an absent tensor
  double At(int64_t r, int64_t c) const { return w[r * cols + c]; }
};

Dense ToDense(const model::TensorView& t) {
  if (t.data == nullptr) return Dense{};
  Dense d{t.rows, t.cols, std::vector<double>(static_cast<size_t>(t.rows * t.cols))};
  std::vector<float> row(static_cast<size_t>(t.cols));
  for (int64_t r = 0; r < t.rows; ++r) {
    kernels::RowToFloat(t, r, row);
    for (int64_t c = 0; c < t.cols; ++c) d.w[r * t.cols + c] = row[c];
  }
  return d;
}

// Y[n, rows] = X[n, cols] · W^T (+ bias when present).
Matrix Project(const Matrix& x, int n, const Dense& w, const Dense& bias = Dense{}) {
  Matrix y(static_cast<size_t>(n) * w.rows);
  for (int t = 0; t < n; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      double sum = bias.w.empty() ? 0.0 : bias.w[r];
      for (int64_t c = 0; c < w.cols; ++c) sum += x[t * w.cols + c] * w.At(r, c);
      y[t * w.rows + r] = sum;
    }
  }
  return y;
}

// Every consecutive `width` slice of x = slice / rms(slice) * gain.
Matrix RmsNormSlices(const Matrix& x, const Dense& gain, int width, double eps) {
  Matrix y(x.size());
  for (size_t s = 0; s < x.size(); s += width) {
    double ss = 0;
    for (int i = 0; i < width; ++i) ss += x[s + i] * x[s + i];
    const double inv = 1.0 / std::sqrt(ss / width + eps);
    for (int i = 0; i < width; ++i) y[s + i] = x[s + i] * inv * gain.w[i];
  }
  return y;
}

// down · (silu(gate · x) * (up · x)) for the n rows of x.
Matrix SwiGlu(const Matrix& x, int n, const Dense& w_gate, const Dense& w_up, const Dense& w_down) {
  Matrix gate = Project(x, n, w_gate);
  const Matrix up = Project(x, n, w_up);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return Project(gate, n, w_down);
}

// x[t] += the mixture of experts of fn[t] for each of the n rows, written out from
// model::ModelConfig::n_experts's rule: p = softmax or sigmoid of router · fn[t];
// selection scores p + bias, the groups outside the best n_expert_groups_used (by the
// sum of their two best scores) excluded; the n_experts_used best scores' experts, each
// weighted by its p (over their sum when normalized, times the scale); plus the shared
// experts' SwiGLU.
void MixtureOfExperts(const model::ModelConfig& c, const model::LayerWeights& L, const Matrix& fn,
                      int n, Matrix& x) {
  const Matrix logits = Project(fn, n, ToDense(L.router));  // [n, n_experts]
  const Dense bias = ToDense(L.expert_probs_bias);
  const int per_group = c.n_expert_groups > 1 ? c.n_experts / c.n_expert_groups : c.n_experts;
  for (int t = 0; t < n; ++t) {
    const Matrix row(fn.begin() + static_cast<size_t>(t) * c.dim,
                     fn.begin() + static_cast<size_t>(t + 1) * c.dim);
    const double* l = &logits[static_cast<size_t>(t) * c.n_experts];
    std::vector<double> p(c.n_experts);
    if (c.expert_gating == model::ExpertGating::kSigmoid) {
      for (int e = 0; e < c.n_experts; ++e) p[e] = 1.0 / (1.0 + std::exp(-l[e]));
    } else {
      const double max_l = *std::max_element(l, l + c.n_experts);
      double total = 0;
      for (int e = 0; e < c.n_experts; ++e) total += std::exp(l[e] - max_l);
      for (int e = 0; e < c.n_experts; ++e) p[e] = std::exp(l[e] - max_l) / total;
    }
    std::vector<std::pair<double, int>> score;  // (-selection score, expert): best first
    for (int e = 0; e < c.n_experts; ++e)
      score.push_back({-(p[e] + (bias.w.empty() ? 0.0 : bias.w[e])), e});
    std::vector<bool> allowed(c.n_experts, true);
    if (c.n_expert_groups > 1) {
      std::vector<std::pair<double, int>> groups;  // (-group score, group)
      for (int g = 0; g < c.n_expert_groups; ++g) {
        std::vector<double> s;
        for (int e = g * per_group; e < (g + 1) * per_group; ++e) s.push_back(-score[e].first);
        std::sort(s.rbegin(), s.rend());
        groups.push_back({-(s[0] + s[1]), g});
      }
      std::sort(groups.begin(), groups.end());
      for (int g = c.n_expert_groups_used; g < c.n_expert_groups; ++g) {
        for (int e = 0; e < per_group; ++e) allowed[groups[g].second * per_group + e] = false;
      }
    }
    std::vector<std::pair<double, int>> candidates;
    for (const auto& s : score) {
      if (allowed[s.second]) candidates.push_back(s);
    }
    std::sort(candidates.begin(), candidates.end());
    double selected = 0;
    for (int j = 0; j < c.n_experts_used; ++j) selected += p[candidates[j].second];
    const double divisor = c.expert_weights_norm ? std::max(selected, 6.103515625e-5) : 1.0;
    for (int j = 0; j < c.n_experts_used; ++j) {
      const size_t e = static_cast<size_t>(candidates[j].second);
      const double weight = p[e] / divisor * c.expert_weights_scale;
      const Matrix y = SwiGlu(row, 1, ToDense(L.expert_gate[e]), ToDense(L.expert_up[e]),
                              ToDense(L.expert_down[e]));
      for (int i = 0; i < c.dim; ++i) x[static_cast<size_t>(t) * c.dim + i] += weight * y[i];
    }
  }
  if (c.n_shared_experts > 0) {
    const Matrix y =
        SwiGlu(fn, n, ToDense(L.shared_gate), ToDense(L.shared_up), ToDense(L.shared_down));
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
}

// One layer's tensors, dequantised.
struct Layer {
  Dense attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down, bq, bk, bv, bo, q_norm, k_norm;
};

Layer ToDense(const model::LayerWeights& L) {
  return {ToDense(L.attn_norm), ToDense(L.wq),       ToDense(L.wk),     ToDense(L.wv),
          ToDense(L.wo),        ToDense(L.ffn_norm), ToDense(L.w_gate), ToDense(L.w_up),
          ToDense(L.w_down),    ToDense(L.bq),       ToDense(L.bk),     ToDense(L.bv),
          ToDense(L.bo),        ToDense(L.q_norm),   ToDense(L.k_norm)};
}

// YaRN as the YaRN paper's "NTK-by-parts" interpolation, llama.cpp's way (in double,
// simplified): the share of pair i whose angle stays unscaled, 1 for pairs below the
// correction range [low, high] (the pairs whose wavelength fits yarn_beta_fast, resp.
// yarn_beta_slow, times into the original context), 0 above it, linear in between.
double YarnMix(const model::ModelConfig& c, int i) {
  if (c.yarn_ext_factor == 0.0f) return 0.0;
  const double d = c.rope_dim, orig = c.YarnOrigContextLength(), base = c.rope_base;
  const auto pair_of_turns = [&](double turns) {
    return d * std::log(orig / (2.0 * std::numbers::pi * turns)) / (2.0 * std::log(base));
  };
  const double low = std::max(0.0, std::floor(pair_of_turns(c.yarn_beta_fast)));
  const double high = std::min(d - 1.0, std::ceil(pair_of_turns(c.yarn_beta_slow)));
  const double y = (i - low) / std::max(0.001, high - low);
  return c.yarn_ext_factor * (1.0 - std::clamp(y, 0.0, 1.0));
}

// The scaling factor s = 1 / rope_freq_scale and YaRN's temperature term 1 + 0.1 ln s.
double YarnTemperature(const model::ModelConfig& c) {
  return 1.0 + 0.1 * std::log(1.0 / static_cast<double>(c.rope_freq_scale));
}

// What RoPE multiplies cos and sin by, in llama.cpp: rope_attn_factor, times YaRN's
// temperature 1 + 0.1 ln s (s > 1) unless deepseek2's log multiplier moves it into the
// attention scale.
double RopeMagnitude(const model::ModelConfig& c) {
  const bool temperature = c.yarn_ext_factor != 0.0f && c.yarn_log_multiplier == 0.0f &&
                           1.0 / static_cast<double>(c.rope_freq_scale) > 1.0;
  return c.rope_attn_factor * (temperature ? YarnTemperature(c) : 1.0);
}

// What q·k is multiplied by: 1 / sqrt(head_dim); for deepseek2, llama.cpp's kq_scale
// m^2 / sqrt(head_dim), m = a * (1 + 0.1 * yarn_log_multiplier * ln s), where a is the
// RoPE magnitude with YaRN and rope_attn_factor * (1 + 0.1 ln s) without it.
double AttentionScale(const model::ModelConfig& c) {
  const double inv_sqrt = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  if (c.architecture != "deepseek2") return inv_sqrt;
  const double a =
      c.yarn_ext_factor != 0.0f ? RopeMagnitude(c) : c.rope_attn_factor * YarnTemperature(c);
  const double m = a * (1.0 + (YarnTemperature(c) - 1.0) * c.yarn_log_multiplier);
  return m * m * inv_sqrt;
}

// RoPE of every head of row t of x [n, heads * width] at position t: dimensions
// [offset, offset + rope_dim) of each head.
void Rotate(const model::ModelConfig& c, Matrix& x, int n, int heads, int width, int offset) {
  const int half = c.rope_dim / 2;
  const double magnitude = RopeMagnitude(c);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < heads; ++h) {
      double* head = &x[(static_cast<size_t>(t) * heads + h) * width + offset];
      for (int i = 0; i < half; ++i) {
        const double factor = c.rope_freq_factors.empty() ? 1.0 : c.rope_freq_factors[i];
        const double unscaled =
            t * std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.rope_dim) / factor;
        const double mix = YarnMix(c, i);
        const double theta =
            unscaled * static_cast<double>(c.rope_freq_scale) * (1.0 - mix) + unscaled * mix;
        const bool adjacent = c.rope_style == model::RopeStyle::kAdjacentPairs;
        double& a = head[adjacent ? 2 * i : i];
        double& b = head[adjacent ? 2 * i + 1 : i + half];
        const double a0 = a, b0 = b;
        a = (a0 * std::cos(theta) - b0 * std::sin(theta)) * magnitude;
        b = (a0 * std::sin(theta) + b0 * std::cos(theta)) * magnitude;
      }
    }
  }
}

// Queries, keys and values of one layer as ordinary multi-head attention.
struct Qkv {
  Matrix q;  // [n, n_heads * head_dim]
  Matrix k;  // [n, kv_heads * head_dim]
  Matrix v;  // [n, kv_heads * v_dim]
  int kv_heads = 0;
  int v_dim = 0;
};

Qkv OrdinaryQkv(const model::ModelConfig& c, const Layer& L, const Matrix& xn, int n) {
  Qkv r{Project(xn, n, L.wq, L.bq), Project(xn, n, L.wk, L.bk), Project(xn, n, L.wv, L.bv),
        c.n_kv_heads, c.head_dim};
  if (c.qk_norm) {
    r.q = RmsNormSlices(r.q, L.q_norm, c.head_dim, c.rms_eps);
    r.k = RmsNormSlices(r.k, L.k_norm, c.head_dim, c.rms_eps);
  }
  Rotate(c, r.q, n, c.n_heads, c.head_dim, 0);
  Rotate(c, r.k, n, c.n_kv_heads, c.head_dim, 0);
  return r;
}

// Multi-head latent attention written out as the DeepSeek-V2 paper's equations (9)-(18),
// decompressed: every head's key is [W_kb_h^T c ‖ k_pe], its value W_vb_h c, where
// c = RMSNorm(latent part of kv_a x) and k_pe = RoPE(rest of kv_a x).
Qkv LatentQkv(const model::ModelConfig& c, const model::LayerWeights& weights, const Matrix& xn,
              int n) {
  const int r = c.kv_lora_rank, rope = c.rope_dim, hd = c.head_dim, nope = hd - rope;
  const int vd = c.v_head_dim, heads = c.n_heads;
  Qkv out;
  out.kv_heads = heads;
  out.v_dim = vd;
  if (c.q_lora_rank > 0) {
    const Matrix qa = RmsNormSlices(Project(xn, n, ToDense(weights.wq_a)),
                                    ToDense(weights.q_a_norm), c.q_lora_rank, c.rms_eps);
    out.q = Project(qa, n, ToDense(weights.wq_b));
  } else {
    out.q = Project(xn, n, ToDense(weights.wq));
  }
  Rotate(c, out.q, n, heads, hd, nope);
  const Matrix kva = Project(xn, n, ToDense(weights.wkv_a));  // [n, r + rope]
  Matrix latent(static_cast<size_t>(n) * r), k_pe(static_cast<size_t>(n) * rope);
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < r; ++i) latent[t * r + i] = kva[t * (r + rope) + i];
    for (int i = 0; i < rope; ++i) k_pe[t * rope + i] = kva[t * (r + rope) + r + i];
  }
  latent = RmsNormSlices(latent, ToDense(weights.kv_a_norm), r, c.rms_eps);
  Rotate(c, k_pe, n, 1, rope, 0);
  const Dense kb = ToDense(weights.wk_b), vb = ToDense(weights.wv_b);
  out.k.assign(static_cast<size_t>(n) * heads * hd, 0.0);
  out.v.assign(static_cast<size_t>(n) * heads * vd, 0.0);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < heads; ++h) {
      double* k = &out.k[(static_cast<size_t>(t) * heads + h) * hd];
      for (int j = 0; j < nope; ++j) {
        for (int i = 0; i < r; ++i) k[j] += kb.At(h * r + i, j) * latent[t * r + i];
      }
      for (int j = 0; j < rope; ++j) k[nope + j] = k_pe[t * rope + j];
      double* v = &out.v[(static_cast<size_t>(t) * heads + h) * vd];
      for (int j = 0; j < vd; ++j) {
        for (int i = 0; i < r; ++i) v[j] += vb.At(h * vd + j, i) * latent[t * r + i];
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<double>> TextbookForward(const model::Model& model,
                                                    std::span<const int32_t> tokens) {
  const model::ModelConfig& c = model.config();
  const model::ModelWeights& w = model.weights();
  const int n = static_cast<int>(tokens.size());
  if (n == 0 || n > c.context_length) {
    return absl::InvalidArgumentError(absl::StrCat("textbook forward: ", n, " tokens"));
  }
  const int dim = c.dim, hd = c.head_dim;
  const double eps = c.rms_eps;

  const Dense embedding = ToDense(w.token_embedding);
  Matrix x(static_cast<size_t>(n) * dim);  // [n, dim] residual stream
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < dim; ++i) x[t * dim + i] = embedding.At(tokens[t], i);
  }
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const model::LayerWeights& weights = w.layers[layer];
    const Layer L = ToDense(weights);
    const Matrix xn = RmsNormSlices(x, L.attn_norm, dim, eps);
    const Qkv qkv = c.mla() ? LatentQkv(c, weights, xn, n) : OrdinaryQkv(c, L, xn, n);
    const Matrix &q = qkv.q, &k = qkv.k, &v = qkv.v;
    const int kvh = qkv.kv_heads, vd = qkv.v_dim, group = c.n_heads / kvh;

    // Masked softmax attention: S[t][j] = scale * q_t · k_j (scale = 1 / sqrt(hd) but for
    // deepseek2's YaRN), -inf where masked.
    const double scale = AttentionScale(c);
    Matrix att(static_cast<size_t>(n) * c.n_heads * vd, 0.0);  // [n, n_heads * vd]
    std::vector<double> s(n);
    for (int h = 0; h < c.n_heads; ++h) {
      const int g = h / group;
      for (int t = 0; t < n; ++t) {
        double max_s = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < n; ++j) {
          const bool visible = j <= t && (c.sliding_window == 0 || t - j < c.sliding_window);
          if (!visible) {
            s[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0;
          for (int i = 0; i < hd; ++i) {
            dot += q[(t * c.n_heads + h) * hd + i] * k[(j * kvh + g) * hd + i];
          }
          s[j] = dot * scale;
          max_s = std::max(max_s, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - max_s));
        for (int j = 0; j < n; ++j) {
          for (int i = 0; i < vd; ++i) {
            att[(t * c.n_heads + h) * vd + i] += s[j] / sum * v[(j * kvh + g) * vd + i];
          }
        }
      }
    }
    const Matrix o = Project(att, n, L.wo, L.bo);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

    const Matrix fn = RmsNormSlices(x, L.ffn_norm, dim, eps);
    if (c.LayerHasExperts(layer)) {
      MixtureOfExperts(c, weights, fn, n, x);
      continue;
    }
    const Matrix down = SwiGlu(fn, n, L.w_gate, L.w_up, L.w_down);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  return Project(RmsNormSlices(x, ToDense(w.output_norm), dim, eps), n, ToDense(w.output));
}

absl::StatusOr<std::vector<int32_t>> TextbookGreedy(const model::Model& model,
                                                    std::vector<int32_t> tokens, int max_tokens,
                                                    int32_t stop_token) {
  const size_t vocab = static_cast<size_t>(model.config().vocab_size);
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    absl::StatusOr<std::vector<double>> logits = TextbookForward(model, tokens);
    if (!logits.ok()) return logits.status();
    const double* last = logits->data() + (tokens.size() - 1) * vocab;
    const int32_t best = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    if (best == stop_token) break;
    out.push_back(best);
    tokens.push_back(best);
  }
  return out;
}

}  // namespace kvserve::backends::testing
