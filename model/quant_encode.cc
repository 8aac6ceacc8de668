// EncodeRow: llama.cpp's reference quantizers (quantize_row_*_ref, ggml-quants.c)
// re-derived: the same choice of scales and codes, so the same floats give the same
// bytes up to float rounding in the least-squares fits.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/quant.h"

namespace kvserve::model {
namespace {

// Round to nearest, ties to even (ggml's nearest_int).
int NearestInt(float v) { return static_cast<int>(std::nearbyint(v)); }

void StoreHalf(uint8_t* p, float v) {
  const uint16_t h = FloatToHalf(v);
  std::memcpy(p, &h, 2);
}

void EncodeQ8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreHalf(b, d);
  for (int j = 0; j < 32; ++j) {
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
  }
}

// The first of the 32 elements of largest magnitude, with its sign (q4_0 and q5_0 map it
// to code 0).
float LargestMagnitude(const float* x) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void EncodeQ4_0(const float* x, uint8_t* b) {
  // The element of largest magnitude maps to code 0 (value -8 * d).
  const float d = LargestMagnitude(x) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreHalf(b, d);
  auto code = [&](float v) {
    return static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(v * id + 8.5f))));
  };
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + 16]) << 4));
}

// Packs 32 codes in [0, 31] as q5_0 / q5_1 store them (model::Q5Code): the low nibbles
// into qs (at qh + 4), the fifth bits into the little-endian 32-bit qh.
void PackQ5(const uint8_t* codes, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < 16; ++j) {
    qh[4 + j] = static_cast<uint8_t>((codes[j] & 15) | ((codes[j + 16] & 15) << 4));
  }
  for (int j = 0; j < 32; ++j) bits |= static_cast<uint32_t>(codes[j] >> 4) << j;
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(bits >> (8 * k));
}

// llama.cpp's quantize_row_q5_0_ref: as q4_0 with 32 levels (the element of largest
// magnitude maps to code 0, value -16 d).
void EncodeQ5_0(const float* x, uint8_t* b) {
  const float d = LargestMagnitude(x) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreHalf(b, d);
  uint8_t codes[32];
  for (int j = 0; j < 32; ++j) {
    codes[j] = static_cast<uint8_t>(
        std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
  }
  PackQ5(codes, b + 2);
}

// llama.cpp's quantize_row_q5_1_ref: codes 0..31 spanning [min, max] of the block,
// rounded by adding 0.5 and truncating.
void EncodeQ5_1(const float* x, uint8_t* b) {
  float min = x[0];
  float max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreHalf(b, d);
  StoreHalf(b + 2, min);
  uint8_t codes[32];
  for (int j = 0; j < 32; ++j) {
    codes[j] = static_cast<uint8_t>(std::min(31, static_cast<int>((x[j] - min) * id + 0.5f)));
  }
  PackQ5(codes, b + 4);
}

// Fits x ~ scale * L - min_out (L in [0, nmax]) minimising sum w * (error)^2 over a
// search of nstep + 1 candidate scales around nmax / (max - min) (llama.cpp's
// make_qkx2_quants with use_mad = false). Returns scale; *min_out is -min (>= 0).
float FitScaleMin(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                  float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *min_out = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best += w[i] * diff * diff;
  }
  uint8_t aux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0;
    float sum_l2 = 0;
    float sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * aux[i] + this_min - x[i];
      err += w[i] * diff * diff;
    }
    if (err < best) {
      std::copy(aux, aux + n, L);
      best = err;
      scale = this_scale;
      min = this_min;
    }
  }
  *min_out = -min;
  return scale;
}

// The k-quants with 6-bit scales and mins (q4_K: nmax 15, q5_K: nmax 31, each with
// llama.cpp's search range for make_qkx2_quants): fits every sub-block of 32, quantizes
// the scales and mins to 6 bits against d and dmin, requantizes with the stored values
// and packs the codes' low nibbles into qs (Q4KQuant's layout) and, for q5_K (qh not
// null), their fifth bits into qh (Q5KQuant's).
struct KMinFit {
  int nmax;
  float rmin;
  int nstep;
};

void EncodeKMin(const float* x, const KMinFit& fit, uint8_t* b, uint8_t* qh, uint8_t* qs) {
  uint8_t L[256];
  float scales[8];
  float mins[8];
  float max_scale = 0;
  float max_min = 0;
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    float w[32];
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[s] = FitScaleMin(32, fit.nmax, xs, w, L + 32 * s, &mins[s], fit.rmin, 0.1f, fit.nstep);
    max_scale = std::max(max_scale, scales[s]);
    max_min = std::max(max_min, mins[s]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t* sb = b + 4;
  std::memset(sb, 0, 12);
  for (int s = 0; s < 8; ++s) {
    const uint8_t ls = static_cast<uint8_t>(std::min(63, NearestInt(inv_scale * scales[s])));
    const uint8_t lm = static_cast<uint8_t>(std::min(63, NearestInt(inv_min * mins[s])));
    if (s < 4) {
      sb[s] = ls;
      sb[s + 4] = lm;
    } else {
      sb[s + 4] = static_cast<uint8_t>((ls & 15) | ((lm & 15) << 4));
      sb[s - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      sb[s] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  StoreHalf(b, max_scale / 63.0f);
  StoreHalf(b + 2, max_min / 63.0f);
  const float d_all = HalfToFloat(FloatToHalf(max_scale / 63.0f));
  const float dmin_all = HalfToFloat(FloatToHalf(max_min / 63.0f));
  // Requantize with the stored (6-bit, f16) scales and mins.
  for (int s = 0; s < 8; ++s) {
    uint8_t sc;
    uint8_t m;
    Q4KScaleMin(sb, s, &sc, &m);
    const float d = d_all * sc;
    if (d == 0.0f) continue;
    const float dm = dmin_all * m;
    for (int l = 0; l < 32; ++l) {
      L[32 * s + l] =
          static_cast<uint8_t>(std::clamp(NearestInt((x[32 * s + l] + dm) / d), 0, fit.nmax));
    }
  }
  if (qh != nullptr) std::memset(qh, 0, 32);
  for (int j = 0; j < 4; ++j) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = L[64 * j + l];
      const uint8_t hi = L[64 * j + 32 + l];
      qs[32 * j + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      if (qh != nullptr) {
        qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * j)) | ((hi >> 4) << (2 * j + 1)));
      }
    }
  }
}

// llama.cpp's quantize_row_q4_K_ref: make_qkx2_quants(32, 15, ..., -1, 0.1, 20).
void EncodeQ4_K(const float* x, uint8_t* b) {
  EncodeKMin(x, KMinFit{.nmax = 15, .rmin = -1.0f, .nstep = 20}, b, nullptr, b + 16);
}

// llama.cpp's quantize_row_q5_K_ref: make_qkx2_quants(32, 31, ..., -0.5, 0.1, 15).
void EncodeQ5_K(const float* x, uint8_t* b) {
  EncodeKMin(x, KMinFit{.nmax = 31, .rmin = -0.5f, .nstep = 15}, b, b + 16, b + 48);
}

// Codes L in [0, 2 nmax) (value L - nmax) for 16 elements and the scale that fits them
// best by weighted (x^2) least squares over 19 candidate scales (llama.cpp's
// make_qx_quants with rmse_type 1).
float FitScale(const float* x, int nmax, int8_t* L) {
  constexpr int n = 16;
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-15f) {  // ggml's GROUP_MAX_EPS
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  auto fit = [&](float iscale, float* sumlx, float* suml2, int8_t* out) {
    *sumlx = 0;
    *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
      if (out != nullptr) out[i] = static_cast<int8_t>(l + nmax);
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  float sumlx;
  float suml2;
  fit(-nmax / max, &sumlx, &suml2, L);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(nmax + 0.1f * is) / max;
    fit(iscale, &sumlx, &suml2, nullptr);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      fit(iscale, &sumlx, &suml2, L);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void EncodeQ6_K(const float* x, uint8_t* b) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0;
  float max_abs_scale = 0;
  for (int g = 0; g < 16; ++g) {
    scales[g] = FitScale(x + 16 * g, 32, L + 16 * g);
    if (std::fabs(scales[g]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[g]);
      max_scale = scales[g];
    }
  }
  std::memset(b, 0, kQ6_KBlockBytes);
  if (max_abs_scale < 1e-15f) return;  // all zero: d = 0
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  int8_t* sc = reinterpret_cast<int8_t*>(b + 192);
  const float iscale = -128.0f / max_scale;
  StoreHalf(b + 208, 1 / iscale);
  const float d_all = HalfToFloat(FloatToHalf(1 / iscale));
  for (int g = 0; g < 16; ++g)
    sc[g] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[g])));
  for (int g = 0; g < 16; ++g) {
    const float d = d_all * sc[g];
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i) {
      L[16 * g + i] = static_cast<int8_t>(std::clamp(NearestInt(x[16 * g + i] / d), -32, 31) + 32);
    }
  }
  // Element e = 128 h + 32 k + l: see DecodeQ6_K in quant_decode.cc.
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int8_t* q = L + 128 * h + l;
      ql[64 * h + l] = static_cast<uint8_t>((q[0] & 15) | ((q[64] & 15) << 4));
      ql[64 * h + l + 32] = static_cast<uint8_t>((q[32] & 15) | ((q[96] & 15) << 4));
      qh[32 * h + l] = static_cast<uint8_t>((q[0] >> 4) | ((q[32] >> 4) << 2) |
                                            ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
    }
  }
}

}  // namespace

void EncodeRow(DType t, std::span<const float> values, uint8_t* out) {
  const size_t n = values.size();
  const float* x = values.data();
  switch (t) {
    case DType::kF32:
      std::memcpy(out, x, n * 4);
      return;
    case DType::kF16:
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = t == DType::kF16 ? FloatToHalf(x[i]) : FloatToBF16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    default:
      break;
  }
  void (*encode)(const float*, uint8_t*) = t == DType::kQ8_0   ? EncodeQ8_0
                                           : t == DType::kQ4_0 ? EncodeQ4_0
                                           : t == DType::kQ5_0 ? EncodeQ5_0
                                           : t == DType::kQ5_1 ? EncodeQ5_1
                                           : t == DType::kQ4_K ? EncodeQ4_K
                                           : t == DType::kQ5_K ? EncodeQ5_K
                                                               : EncodeQ6_K;
  const size_t block = static_cast<size_t>(DTypeBlockElems(t));
  for (size_t b = 0; b < n / block; ++b) encode(x + b * block, out + b * DTypeBytes(t, block));
}

}  // namespace kvserve::model
