#include "backends/cpu_blas/q8_activations.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/quant.h"

namespace kvserve::backends::cpu_blas {
namespace {

using model::DType;

float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return model::HalfToFloat(h);
}

// nearbyint(v) for |v| <= 2^22 in the default rounding mode, without a libm call (the
// library is built for baseline x86-64, which has no rounding instruction): adding and
// subtracting 1.5 * 2^23 leaves v rounded to an integer, ties to even.
float RoundHalfEven(float v) {
  // (IEEE arithmetic: without -ffast-math the compiler keeps both operations.)
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// d and q for n floats: d = max|x| / 127, q = round(x / d) in [-127, 127], computed as
// llama.cpp does, as round(x * (1 / d)); where 1 / d overflows (max|x| below about
// 3.7e-37) as round(x / d) instead (x * inf would be inf or NaN).
float QuantizeBlock(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const bool divide = std::isinf(id);
  for (int j = 0; j < n; ++j) {
    const float v = divide ? x[j] / d : x[j] * id;
    q[j] = static_cast<int8_t>(std::clamp(static_cast<int>(RoundHalfEven(v)), -127, 127));
  }
  return d;
}

}  // namespace

size_t Q8RowBytes(DType weights, int64_t cols) {
  const size_t c = static_cast<size_t>(cols);
  switch (weights) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
      return c / 32 * sizeof(Q8Block);
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return c / 256 * sizeof(Q8KBlock);
    default:
      return 0;
  }
}

void QuantizeActivations(DType weights, const float* x, int64_t cols, void* out) {
  if (UsesQ8Blocks(weights)) {
    auto* blocks = static_cast<Q8Block*>(out);
    for (int64_t b = 0; b < cols / 32; ++b) {
      Q8Block& o = blocks[b];
      o.d = QuantizeBlock(x + 32 * b, 32, o.q);
      o.sum = 0;
      for (int j = 0; j < 32; ++j) o.sum += o.q[j];
    }
    return;
  }
  auto* blocks = static_cast<Q8KBlock*>(out);
  for (int64_t b = 0; b < cols / 256; ++b) {
    Q8KBlock& o = blocks[b];
    o.d = QuantizeBlock(x + 256 * b, 256, o.q);
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += o.q[16 * g + j];
      o.bsums[g] = static_cast<int16_t>(s);
    }
  }
}

size_t Q8RowBytesInterleaved(DType weights, int64_t cols) {
  const size_t c = static_cast<size_t>(cols);
  return UsesQ8Blocks(weights) ? c / 256 * sizeof(Q8x8Block) : c / 256 * sizeof(Q8KBlock);
}

namespace {

// 256 codes in natural order to the interleaved order (see Q8x8Block).
void Interleave(const int8_t* natural, int8_t* out) {
  for (int v = 0; v < 8; ++v) {
    for (int k = 0; k < 8; ++k) std::memcpy(out + 32 * k + 4 * v, natural + 32 * v + 4 * k, 4);
  }
}

}  // namespace

void QuantizeActivationsInterleaved(DType weights, const float* x, int64_t cols, void* out) {
  QuantizeActivations(weights, x, cols, out);
  InterleaveActivations(weights, cols, out);
}

void InterleaveActivations(DType weights, int64_t cols, void* row) {
  if (UsesQ8Blocks(weights)) {
    static_assert(sizeof(Q8x8Block) == 8 * sizeof(Q8Block));
    auto* blocks = static_cast<Q8x8Block*>(row);
    for (int64_t b = 0; b < cols / 256; ++b) {
      Q8Block natural[8];
      std::memcpy(natural, &blocks[b], sizeof(natural));
      int8_t codes[256];
      for (int v = 0; v < 8; ++v) {
        blocks[b].d[v] = natural[v].d;
        blocks[b].sum[v] = natural[v].sum;
        std::memcpy(codes + 32 * v, natural[v].q, 32);
      }
      Interleave(codes, blocks[b].q);
    }
    return;
  }
  auto* blocks = static_cast<Q8KBlock*>(row);
  for (int64_t b = 0; b < cols / 256; ++b) {
    int8_t codes[256];
    std::memcpy(codes, blocks[b].q, sizeof(codes));
    Interleave(codes, blocks[b].q);
  }
}

float DotQ8_0(const uint8_t* w, const Q8Block* x, int64_t cols) {
  float sum = 0.0f;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* wb = w + b * model::kQ8_0BlockBytes;
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += static_cast<int8_t>(wb[2 + j]) * x[b].q[j];
    sum += LoadHalf(wb) * x[b].d * static_cast<float>(s);
  }
  return sum;
}

float DotQ4_0(const uint8_t* w, const Q8Block* x, int64_t cols) {
  float sum = 0.0f;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* wb = w + b * model::kQ4_0BlockBytes;
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) {
      s += ((wb[2 + j] & 15) - 8) * x[b].q[j] + ((wb[2 + j] >> 4) - 8) * x[b].q[j + 16];
    }
    sum += LoadHalf(wb) * x[b].d * static_cast<float>(s);
  }
  return sum;
}

namespace {

// sum_j q_j x_j over a q5_0 / q5_1 block's 32 codes (model::Q5Code, qh at `qh`).
int32_t Q5CodeDot(const uint8_t* qh, const Q8Block& x) {
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) s += model::Q5Code(qh, j) * x.q[j];
  return s;
}

}  // namespace

// W · x = d d_x (sum q x - 16 sum x) per block.
float DotQ5_0(const uint8_t* w, const Q8Block* x, int64_t cols) {
  float sum = 0.0f;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* wb = w + b * model::kQ5_0BlockBytes;
    const int32_t s = Q5CodeDot(wb + 2, x[b]) - 16 * x[b].sum;
    sum += LoadHalf(wb) * x[b].d * static_cast<float>(s);
  }
  return sum;
}

// W · x = d d_x sum q x + m d_x sum x per block.
float DotQ5_1(const uint8_t* w, const Q8Block* x, int64_t cols) {
  float sum = 0.0f;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* wb = w + b * model::kQ5_1BlockBytes;
    sum += LoadHalf(wb) * x[b].d * static_cast<float>(Q5CodeDot(wb + 4, x[b])) +
           LoadHalf(wb + 2) * x[b].d * static_cast<float>(x[b].sum);
  }
  return sum;
}

namespace {

// q4_K and q5_K: 6-bit scales and mins per sub-block of 32 (model::Q4KScaleMin), codes
// by kQuant; W · x = d_x (d sum_s sc_s sum_j q_j x_j - dmin sum_s m_s sum_j x_j).
template <int kBlockBytes, int (*kQuant)(const uint8_t*, int)>
float DotKMin(const uint8_t* w, const Q8KBlock* x, int64_t cols) {
  float sum = 0.0f;
  for (int64_t b = 0; b < cols / 256; ++b) {
    const uint8_t* wb = w + b * kBlockBytes;
    int32_t scaled = 0;  // sum_s sc_s * sum_j q_j x_j
    int32_t mins = 0;    // sum_s m_s * sum_j x_j
    for (int s = 0; s < 8; ++s) {
      uint8_t sc;
      uint8_t m;
      model::Q4KScaleMin(wb + 4, s, &sc, &m);
      int32_t dot = 0;
      for (int e = 32 * s; e < 32 * s + 32; ++e) dot += kQuant(wb, e) * x[b].q[e];
      scaled += sc * dot;
      mins += m * (x[b].bsums[2 * s] + x[b].bsums[2 * s + 1]);
    }
    sum += x[b].d * (LoadHalf(wb) * static_cast<float>(scaled) -
                     LoadHalf(wb + 2) * static_cast<float>(mins));
  }
  return sum;
}

}  // namespace

float DotQ4_K(const uint8_t* w, const Q8KBlock* x, int64_t cols) {
  return DotKMin<model::kQ4_KBlockBytes, &model::Q4KQuant>(w, x, cols);
}

float DotQ5_K(const uint8_t* w, const Q8KBlock* x, int64_t cols) {
  return DotKMin<model::kQ5_KBlockBytes, &model::Q5KQuant>(w, x, cols);
}

float DotQ6_K(const uint8_t* w, const Q8KBlock* x, int64_t cols) {
  float sum = 0.0f;
  for (int64_t b = 0; b < cols / 256; ++b) {
    const uint8_t* wb = w + b * model::kQ6_KBlockBytes;
    const auto* scales = reinterpret_cast<const int8_t*>(wb + 192);
    int32_t total = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t dot = 0;
      for (int e = 16 * g; e < 16 * g + 16; ++e) dot += model::Q6KQuant(wb, e) * x[b].q[e];
      total += scales[g] * dot;
    }
    sum += LoadHalf(wb + 208) * x[b].d * static_cast<float>(total);
  }
  return sum;
}

}  // namespace kvserve::backends::cpu_blas
