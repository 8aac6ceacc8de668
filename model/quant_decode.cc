// DecodeRow: dequantization element by element, following ggml's dequantize_row_* math.
#include <cstring>

#include "model/quant.h"

namespace kvserve::model {
namespace {

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float LoadHalf(const uint8_t* p) { return HalfToFloat(Load16(p)); }

// q8_0 block: f16 d, int8 q[32]; x[j] = d * q[j].
void DecodeQ8_0(const uint8_t* b, float* x) {
  const float d = LoadHalf(b);
  for (int j = 0; j < 32; ++j) x[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

// q4_0 block: f16 d, uint8 qs[16]; x[j] = d * ((qs[j] & 15) - 8),
// x[j + 16] = d * ((qs[j] >> 4) - 8).
void DecodeQ4_0(const uint8_t* b, float* x) {
  const float d = LoadHalf(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    x[j] = d * static_cast<float>((qs[j] & 15) - 8);
    x[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// q5_0 and q5_1 blocks: f16 d, for q5_1 f16 m, then qh[4] and qs[16] (Q5Code);
// x = d * (q + offset) + m with offset -16, m = 0 for q5_0, offset 0 for q5_1.
void DecodeQ5(float d, float m, int offset, const uint8_t* qh, float* x) {
  for (int j = 0; j < 32; ++j) x[j] = d * static_cast<float>(Q5Code(qh, j) + offset) + m;
}

void DecodeQ5_0(const uint8_t* b, float* x) { DecodeQ5(LoadHalf(b), 0.0f, -16, b + 2, x); }

void DecodeQ5_1(const uint8_t* b, float* x) { DecodeQ5(LoadHalf(b), LoadHalf(b + 2), 0, b + 4, x); }

// The k-quants with 6-bit scales and mins (q4_K, q5_K): f16 d, f16 dmin, scales[12], then
// the codes. Sub-block s (32 elements) has a scale sc and min m (Q4KScaleMin);
// x = d * sc * q - dmin * m. Within each 64 elements, 32 bytes of qs hold the first 32
// low nibbles and the next 32 in their high nibbles (Q4KQuant); q5_K adds bit s of
// qh[l] as the fifth bit of element 32 s + l (Q5KQuant). Written out here so the compiler
// vectorises it (tile decoding for prefill). qh == nullptr: q4_K.
void DecodeKMin(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* x) {
  const float d = LoadHalf(b);
  const float dmin = LoadHalf(b + 2);
  for (int j = 0; j < 4; ++j) {
    uint8_t sc0, m0, sc1, m1;
    Q4KScaleMin(b + 4, 2 * j, &sc0, &m0);
    Q4KScaleMin(b + 4, 2 * j + 1, &sc1, &m1);
    const float d0 = d * sc0, o0 = dmin * m0, d1 = d * sc1, o1 = dmin * m1;
    const uint8_t* q = qs + 32 * j;
    float* y = x + 64 * j;
    uint8_t h0[32] = {};
    uint8_t h1[32] = {};
    if (qh != nullptr) {
      for (int l = 0; l < 32; ++l) {
        h0[l] = static_cast<uint8_t>(((qh[l] >> (2 * j)) & 1) << 4);
        h1[l] = static_cast<uint8_t>(((qh[l] >> (2 * j + 1)) & 1) << 4);
      }
    }
    for (int l = 0; l < 32; ++l) y[l] = d0 * static_cast<float>((q[l] & 15) | h0[l]) - o0;
    for (int l = 0; l < 32; ++l) y[32 + l] = d1 * static_cast<float>((q[l] >> 4) | h1[l]) - o1;
  }
}

// q4_K block: f16 d, f16 dmin, scales[12], qs[128].
void DecodeQ4_K(const uint8_t* b, float* x) { DecodeKMin(b, nullptr, b + 16, x); }

// q5_K block: f16 d, f16 dmin, scales[12], qh[32], qs[128].
void DecodeQ5_K(const uint8_t* b, float* x) { DecodeKMin(b, b + 16, b + 48, x); }

// q6_K block: ql[128], qh[64], int8 scales[16], f16 d; x = d * scale * (q - 32), the
// layout of Q6KQuant written out per 32 elements so the compiler vectorises it.
void DecodeQ6_K(const uint8_t* b, float* x) {
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = LoadHalf(b + 208);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    for (int k = 0; k < 4; ++k) {
      const uint8_t* lo = ql + 32 * (k % 2);
      const int shift = 4 * (k / 2);
      float* y = x + 128 * h + 32 * k;
      const float s0 = d * scales[8 * h + 2 * k];
      const float s1 = d * scales[8 * h + 2 * k + 1];
      for (int l = 0; l < 32; ++l) {
        const int q = (((lo[l] >> shift) & 15) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        y[l] = (l < 16 ? s0 : s1) * static_cast<float>(q);
      }
    }
  }
}

}  // namespace

namespace {

// Within each 64 elements, 32 bytes of qs hold the first 32 in their low nibbles and the
// next 32 in their high nibbles (q4_K's codes, q5_K's low 4 bits).
int KNibble(const uint8_t* qs, int e) {
  return (qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 15;
}

}  // namespace

int Q4KQuant(const uint8_t* block, int e) { return KNibble(block + 16, e); }

int Q5KQuant(const uint8_t* block, int e) {
  const uint8_t* qh = block + 16;
  return KNibble(block + 48, e) | (((qh[e % 32] >> (e / 32)) & 1) << 4);
}

int Q6KQuant(const uint8_t* block, int e) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const int h = e / 128;
  const int k = (e % 128) / 32;
  const int l = e % 32;
  const int lo = (ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
  const int hi = (qh[32 * h + l] >> (2 * k)) & 3;
  return (lo | (hi << 4)) - 32;
}

void DecodeRow(DType t, const uint8_t* row, std::span<float> out) {
  const size_t n = out.size();
  float* x = out.data();
  switch (t) {
    case DType::kF32:
      std::memcpy(x, row, n * 4);
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) x[i] = HalfToFloat(Load16(row + 2 * i));
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) x[i] = BF16ToFloat(Load16(row + 2 * i));
      return;
    default:
      break;
  }
  void (*decode)(const uint8_t*, float*) = t == DType::kQ8_0   ? DecodeQ8_0
                                           : t == DType::kQ4_0 ? DecodeQ4_0
                                           : t == DType::kQ5_0 ? DecodeQ5_0
                                           : t == DType::kQ5_1 ? DecodeQ5_1
                                           : t == DType::kQ4_K ? DecodeQ4_K
                                           : t == DType::kQ5_K ? DecodeQ5_K
                                                               : DecodeQ6_K;
  const size_t block = static_cast<size_t>(DTypeBlockElems(t));
  for (size_t b = 0; b < n / block; ++b) decode(row + b * DTypeBytes(t, block), x + b * block);
}

}  // namespace kvserve::model
