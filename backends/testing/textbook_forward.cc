#include "backends/testing/textbook_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvserve::backends::testing {
namespace {

using Matrix = std::vector<double>;  // row-major

// Element (r, c) of an F32 tensor.
double At(const model::TensorView& t, int64_t r, int64_t c) {
  float v;
  std::memcpy(&v, static_cast<const uint8_t*>(t.data) + (r * t.cols + c) * sizeof(float),
              sizeof(float));
  return v;
}

// Y[n, rows] = X[n, cols] · W^T (+ bias when given).
Matrix Project(const Matrix& x, int n, const model::TensorView& w,
               const model::TensorView* bias = nullptr) {
  Matrix y(static_cast<size_t>(n) * w.rows);
  for (int t = 0; t < n; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      double sum = bias != nullptr && bias->data != nullptr ? At(*bias, 0, r) : 0.0;
      for (int64_t c = 0; c < w.cols; ++c) sum += x[t * w.cols + c] * At(w, r, c);
      y[t * w.rows + r] = sum;
    }
  }
  return y;
}

// Every consecutive `width` slice of x = slice / rms(slice) * gain.
Matrix RmsNormSlices(const Matrix& x, const model::TensorView& gain, int width, double eps) {
  Matrix y(x.size());
  for (size_t s = 0; s < x.size(); s += width) {
    double ss = 0;
    for (int i = 0; i < width; ++i) ss += x[s + i] * x[s + i];
    const double inv = 1.0 / std::sqrt(ss / width + eps);
    for (int i = 0; i < width; ++i) y[s + i] = x[s + i] * inv * At(gain, 0, i);
  }
  return y;
}

// RoPE of every head of row t of x [n, heads * head_dim] at position t.
void Rotate(const model::ModelConfig& c, Matrix& x, int n, int heads) {
  const int half = c.rope_dim / 2;
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < heads; ++h) {
      double* head = &x[(static_cast<size_t>(t) * heads + h) * c.head_dim];
      for (int i = 0; i < half; ++i) {
        const double factor = c.rope_freq_factors.empty() ? 1.0 : c.rope_freq_factors[i];
        const double theta = t * static_cast<double>(c.rope_freq_scale) *
                             std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.rope_dim) /
                             factor;
        const bool adjacent = c.rope_style == model::RopeStyle::kAdjacentPairs;
        double& a = head[adjacent ? 2 * i : i];
        double& b = head[adjacent ? 2 * i + 1 : i + half];
        const double a0 = a, b0 = b;
        a = a0 * std::cos(theta) - b0 * std::sin(theta);
        b = a0 * std::sin(theta) + b0 * std::cos(theta);
      }
    }
  }
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
  std::vector<const model::TensorView*> all = {&w.token_embedding, &w.output, &w.output_norm};
  for (const model::LayerWeights& L : w.layers) {
    for (const model::TensorView* t :
         {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_norm, &L.w_gate, &L.w_up, &L.w_down,
          &L.bq, &L.bk, &L.bv, &L.bo, &L.q_norm, &L.k_norm}) {
      all.push_back(t);
    }
  }
  for (const model::TensorView* t : all) {
    if (t->data != nullptr && t->type != model::DType::kF32) {
      return absl::InvalidArgumentError("textbook forward: weights must be f32");
    }
  }
  const int dim = c.dim, hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  const double eps = c.rms_eps;

  Matrix x(static_cast<size_t>(n) * dim);  // [n, dim] residual stream
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < dim; ++i) x[t * dim + i] = At(w.token_embedding, tokens[t], i);
  }
  for (const model::LayerWeights& L : w.layers) {
    const Matrix xn = RmsNormSlices(x, L.attn_norm, dim, eps);
    Matrix q = Project(xn, n, L.wq, &L.bq);  // [n, n_heads * hd]
    Matrix k = Project(xn, n, L.wk, &L.bk);  // [n, n_kv_heads * hd]
    const Matrix v = Project(xn, n, L.wv, &L.bv);
    if (c.qk_norm) {
      q = RmsNormSlices(q, L.q_norm, hd, eps);
      k = RmsNormSlices(k, L.k_norm, hd, eps);
    }
    Rotate(c, q, n, c.n_heads);
    Rotate(c, k, n, c.n_kv_heads);

    // Masked softmax attention: S[t][j] = q_t · k_j / sqrt(hd), -inf where masked.
    Matrix att(static_cast<size_t>(n) * c.q_dim(), 0.0);  // [n, n_heads * hd]
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
            dot += q[(t * c.n_heads + h) * hd + i] * k[(j * c.n_kv_heads + g) * hd + i];
          }
          s[j] = dot / std::sqrt(static_cast<double>(hd));
          max_s = std::max(max_s, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - max_s));
        for (int j = 0; j < n; ++j) {
          for (int i = 0; i < hd; ++i) {
            att[(t * c.n_heads + h) * hd + i] += s[j] / sum * v[(j * c.n_kv_heads + g) * hd + i];
          }
        }
      }
    }
    const Matrix o = Project(att, n, L.wo, &L.bo);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

    const Matrix fn = RmsNormSlices(x, L.ffn_norm, dim, eps);
    Matrix gate = Project(fn, n, L.w_gate);
    const Matrix up = Project(fn, n, L.w_up);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    const Matrix down = Project(gate, n, L.w_down);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  return Project(RmsNormSlices(x, w.output_norm, dim, eps), n, w.output);
}

}  // namespace kvserve::backends::testing
