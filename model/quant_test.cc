// DecodeRow on blocks built by hand from ggml's struct layouts (ggml-common.h), and
// EncodeRow round trips within each format's quantization error.
#include "model/quant.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::model {
namespace {

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = FloatToHalf(v);
  std::memcpy(p, &h, 2);
}

std::vector<float> Decode(DType t, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n);
  DecodeRow(t, bytes.data(), out);
  return out;
}

TEST(DecodeRowTest, Q8_0IsScaleTimesInt8) {
  std::vector<uint8_t> b(34);
  PutHalf(b.data(), 0.25f);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  const std::vector<float> x = Decode(DType::kQ8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(x[j], 0.25f * static_cast<float>(j * 8 - 128)) << j;
}

TEST(DecodeRowTest, Q4_0LowNibblesFirstHalfHighNibblesSecond) {
  std::vector<uint8_t> b(18);
  PutHalf(b.data(), 0.5f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> x = Decode(DType::kQ4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(x[j], 0.5f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(x[j + 16], 0.5f * static_cast<float>(7 - j)) << j;
  }
}

// block_q5_0: f16 d, qh[4], qs[16]. Element j's low 4 bits in qs[j % 16] (low nibble for
// j < 16), its fifth bit = bit j of the little-endian 32-bit qh; x = d * (q - 16).
TEST(DecodeRowTest, Q5_0FifthBitsFromTheLittleEndianQh) {
  std::vector<uint8_t> b(22, 0);
  PutHalf(b.data(), 0.5f);
  // qh = 0xA5C3F00F: elements 0-3, 12-15, 16-17, 22-23, 24, 26, 29, 31 have the fifth bit.
  const uint8_t qh[4] = {0x0f, 0xf0, 0xc3, 0xa5};
  std::memcpy(b.data() + 2, qh, 4);
  for (int j = 0; j < 16; ++j) b[6 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> x = Decode(DType::kQ5_0, b, 32);
  const uint32_t bits = 0xa5c3f00fu;
  for (int j = 0; j < 32; ++j) {
    const int nibble = j < 16 ? j : 31 - j;
    const int q = nibble + static_cast<int>((bits >> j) & 1) * 16;
    EXPECT_EQ(Q5Code(b.data() + 2, j), q) << j;
    EXPECT_EQ(x[j], 0.5f * static_cast<float>(q - 16)) << j;
  }
  // Hand-checked: element 1 (nibble 1, fifth bit set): 0.5 * (17 - 16) = 0.5; element 4
  // (nibble 4, no fifth bit): 0.5 * (4 - 16) = -6; element 31 (high nibble of qs[15] = 0,
  // bit 31 set): 0.5 * (16 - 16) = 0.
  EXPECT_EQ(x[1], 0.5f);
  EXPECT_EQ(x[4], -6.0f);
  EXPECT_EQ(x[31], 0.0f);
}

// block_q5_1: f16 d, f16 m, qh[4], qs[16] (as q5_0's); x = d * q + m.
TEST(DecodeRowTest, Q5_1ScaleAndMin) {
  std::vector<uint8_t> b(24, 0);
  PutHalf(b.data(), 0.25f);
  PutHalf(b.data() + 2, -3.0f);
  b[4] = 0x01;  // element 0
  b[7] = 0x80;  // element 31
  for (int j = 0; j < 16; ++j) b[8 + j] = static_cast<uint8_t>(15 | (j << 4));
  const std::vector<float> x = Decode(DType::kQ5_1, b, 32);
  for (int j = 0; j < 32; ++j) {
    const int q = (j < 16 ? 15 : j - 16) + (j == 0 || j == 31 ? 16 : 0);
    EXPECT_EQ(Q5Code(b.data() + 4, j), q) << j;
    EXPECT_EQ(x[j], 0.25f * static_cast<float>(q) - 3.0f) << j;
  }
  EXPECT_EQ(x[0], 0.25f * 31 - 3.0f);  // 4.75
  EXPECT_EQ(x[31], 0.25f * 31 - 3.0f);
  EXPECT_EQ(x[16], -3.0f);  // code 0
}

// A q4_K or q5_K block of `bytes` bytes, zero but for its head: f16 d, f16 dmin and the
// 12 scale bytes (get_scale_min_k4's layout): sub-blocks 0-3 in the low 6 bits of bytes 0-3
// (scales) and 4-7 (mins); sub-blocks 4-7 in the nibbles of bytes 8-11, their top 2 bits in
// the top bits of bytes 0-3 (scales) and 4-7 (mins).
std::vector<uint8_t> KMinBlock(size_t bytes, float d, float dmin, const int (&sc)[8],
                               const int (&m)[8]) {
  std::vector<uint8_t> b(bytes, 0);
  PutHalf(b.data(), d);
  PutHalf(b.data() + 2, dmin);
  uint8_t* scales = b.data() + 4;
  for (int s = 0; s < 4; ++s) {
    scales[s] = static_cast<uint8_t>(sc[s] | ((sc[s + 4] >> 4) << 6));
    scales[s + 4] = static_cast<uint8_t>(m[s] | ((m[s + 4] >> 4) << 6));
    scales[s + 8] = static_cast<uint8_t>((sc[s + 4] & 15) | ((m[s + 4] & 15) << 4));
  }
  return b;
}

TEST(DecodeRowTest, Q4_KSixBitScalesAndMins) {
  // Sub-block s: scale sc[s], min m[s]; 4 to 7 use the packed high bits (values >= 16).
  const int sc[8] = {1, 2, 3, 63, 17, 40, 5, 63};
  const int m[8] = {0, 7, 63, 1, 16, 33, 2, 48};
  std::vector<uint8_t> b = KMinBlock(144, 0.125f, 0.5f, sc, m);
  // Element e: q = (e * 7) % 16; sub-block s = e / 32 lives in bytes 32 * (s / 2), low
  // nibble for even s, high nibble for odd s.
  uint8_t* qs = b.data() + 16;
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    const int q = (e * 7) % 16;
    qs[32 * (s / 2) + e % 32] |= static_cast<uint8_t>(q << (4 * (s % 2)));
  }
  const std::vector<float> x = Decode(DType::kQ4_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_FLOAT_EQ(x[e], 0.125f * sc[s] * ((e * 7) % 16) - 0.5f * m[s]) << e;
  }
}

TEST(DecodeRowTest, Q5_KFifthBitsInQhAndQ4KScales) {
  // Block: f16 d, f16 dmin, scales[12] packed as q4_K's, qh[32], qs[128] (block_q5_K).
  const int sc[8] = {63, 1, 30, 2, 16, 47, 9, 33};
  const int m[8] = {5, 0, 62, 19, 31, 1, 63, 20};
  std::vector<uint8_t> b = KMinBlock(176, 0.25f, 0.375f, sc, m);
  // Element e = 64 j + 32 h + l (sub-block s = 2 j + h): its low 4 bits in qs[32 j + l]
  // (low nibble for h = 0, high for h = 1), its fifth bit in qh[l], bit s
  // (dequantize_row_q5_K's masks u1 = 1 << 2j, u2 = 2 << 2j). Codes cover 0..31.
  auto q_of = [](int e) { return (e * 13 + 3) % 32; };
  uint8_t* qh = b.data() + 16;
  uint8_t* qs = b.data() + 48;
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    const int l = e % 32;
    qs[32 * (s / 2) + l] |= static_cast<uint8_t>((q_of(e) & 15) << (4 * (s % 2)));
    if (q_of(e) >= 16) qh[l] |= static_cast<uint8_t>(1 << s);
  }
  const std::vector<float> x = Decode(DType::kQ5_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_EQ(Q5KQuant(b.data(), e), q_of(e)) << e;
    EXPECT_FLOAT_EQ(x[e], 0.25f * sc[s] * q_of(e) - 0.375f * m[s]) << e;
  }
  // One hand-checked element: e = 100 (s = 3, code 1303 % 32 = 23: fifth bit set):
  // 0.25 * 2 * 23 - 0.375 * 19 = 4.375.
  EXPECT_FLOAT_EQ(x[100], 4.375f);
}

TEST(DecodeRowTest, Q6_KSixBitQuantsAndSignedScales) {
  std::vector<uint8_t> b(210, 0);
  uint8_t* ql = b.data();
  uint8_t* qh = b.data() + 128;
  int8_t* scales = reinterpret_cast<int8_t*>(b.data() + 192);
  PutHalf(b.data() + 208, 0.25f);
  for (int g = 0; g < 16; ++g) scales[g] = static_cast<int8_t>(g * 9 - 70);
  // Element e = 128 h + 32 k + l: low 4 bits in ql[64 h + 32 (k % 2) + l], nibble k / 2;
  // high 2 bits in qh[32 h + l], bits 2k and 2k + 1 (dequantize_row_q6_K's y[l + 32k]).
  auto q_of = [](int e) { return (e * 11 + 5) % 64; };
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128;
    const int k = (e % 128) / 32;
    const int l = e % 32;
    ql[64 * h + 32 * (k % 2) + l] |= static_cast<uint8_t>((q_of(e) & 15) << (4 * (k / 2)));
    qh[32 * h + l] |= static_cast<uint8_t>((q_of(e) >> 4) << (2 * k));
  }
  const std::vector<float> x = Decode(DType::kQ6_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_FLOAT_EQ(x[e], 0.25f * scales[e / 16] * (q_of(e) - 32)) << e;
  }
}

// Deterministic values with a spread of magnitudes and signs (some blocks all zero).
std::vector<float> TestValues(size_t n) {
  std::vector<float> v(n);
  uint32_t s = 12345;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float u = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
    v[i] = (i / 256 == 2) ? 0.0f : u * (1.0f + static_cast<float>(i % 97) / 10.0f);
  }
  return v;
}

TEST(EncodeRowTest, RoundTripsWithinQuantizationError) {
  struct Case {
    DType type;
    float max_rel_rms;  // RMS error / RMS value over the row
  };
  // The bounds sit about 1.5x above what each format gives on these values (q8_0 ~ 0.4 %,
  // q6_K ~ 1.5 %, q5_K ~ 3.4 %, q5_1 ~ 3.4 %, q5_0 ~ 3.8 %, q4_K ~ 5 %, q4_0 ~ 8 %).
  for (const Case& c :
       {Case{DType::kF16, 1e-3f}, Case{DType::kBF16, 5e-3f}, Case{DType::kQ8_0, 0.008f},
        Case{DType::kQ6_K, 0.025f}, Case{DType::kQ5_K, 0.05f}, Case{DType::kQ4_K, 0.08f},
        Case{DType::kQ4_0, 0.12f}, Case{DType::kQ5_0, 0.06f}, Case{DType::kQ5_1, 0.05f}}) {
    const std::vector<float> v = TestValues(1024);
    std::vector<uint8_t> bytes(DTypeBytes(c.type, v.size()));
    EncodeRow(c.type, v, bytes.data());
    const std::vector<float> back = Decode(c.type, bytes, v.size());
    double err2 = 0;
    double val2 = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      err2 += (back[i] - v[i]) * (back[i] - v[i]);
      val2 += v[i] * v[i];
      if (i / 256 == 2) {
        EXPECT_EQ(back[i], 0.0f) << DTypeName(c.type) << " " << i;
      }
    }
    const double rel = std::sqrt(err2 / val2);
    EXPECT_LT(rel, c.max_rel_rms) << DTypeName(c.type);
    EXPECT_GT(rel, c.max_rel_rms / 20) << DTypeName(c.type) << ": suspiciously exact";
  }
}

TEST(EncodeRowTest, Q4_0MapsTheLargestMagnitudeToCodeZero) {
  std::vector<float> v(32, 0.0f);
  v[3] = -4.0f;  // d = -4 / -8 = 0.5, so -4 is code 0 and 3.5 code 15
  v[5] = 3.5f;
  v[20] = 1.0f;
  std::vector<uint8_t> b(18);
  EncodeRow(DType::kQ4_0, v, b.data());
  EXPECT_EQ(HalfToFloat(static_cast<uint16_t>(b[0] | (b[1] << 8))), 0.5f);
  EXPECT_EQ(b[2 + 3] & 15, 0);
  EXPECT_EQ(b[2 + 5] & 15, 15);
  EXPECT_EQ(b[2 + 4] >> 4, 10);  // element 20: 1.0 / 0.5 + 8
  const std::vector<float> x = Decode(DType::kQ4_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(x[j], v[j]) << j;
}

TEST(EncodeRowTest, Q5_0MapsTheLargestMagnitudeToCodeZero) {
  std::vector<float> v(32, 0.0f);
  v[3] = -8.0f;  // d = -8 / -16 = 0.5: -8 is code 0, 7.5 code 31, 0 code 16
  v[5] = 7.5f;
  v[20] = 1.0f;   // 1.0 / 0.5 + 16 = 18 (fifth bit set, nibble 2)
  v[21] = -1.0f;  // code 14 (no fifth bit)
  std::vector<uint8_t> b(22);
  EncodeRow(DType::kQ5_0, v, b.data());
  EXPECT_EQ(HalfToFloat(static_cast<uint16_t>(b[0] | (b[1] << 8))), 0.5f);
  // qh: every element but 3 (code 0) and 21 (code 14) has its fifth bit.
  uint32_t qh;
  std::memcpy(&qh, b.data() + 2, 4);
  EXPECT_EQ(qh, ~((1u << 3) | (1u << 21)));
  EXPECT_EQ(b[6 + 3] & 15, 0);
  EXPECT_EQ(b[6 + 5] & 15, 15);
  EXPECT_EQ(b[6 + 4] >> 4, 2);
  EXPECT_EQ(b[6 + 5] >> 4, 14);
  const std::vector<float> x = Decode(DType::kQ5_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(x[j], v[j]) << j;
}

TEST(EncodeRowTest, Q5_1SpansMinToMax) {
  std::vector<float> v(32, 1.0f);
  v[0] = -2.0f;  // m = -2, d = (13.5 - -2) / 31 = 0.5
  v[17] = 13.5f;
  v[9] = 0.3f;  // (0.3 + 2) / 0.5 + 0.5 = 5.1: code 5, back to 0.5
  std::vector<uint8_t> b(24);
  EncodeRow(DType::kQ5_1, v, b.data());
  EXPECT_EQ(HalfToFloat(static_cast<uint16_t>(b[0] | (b[1] << 8))), 0.5f);
  EXPECT_EQ(HalfToFloat(static_cast<uint16_t>(b[2] | (b[3] << 8))), -2.0f);
  // Codes: element 0 -> 0, 17 -> 31, 9 -> 5, the rest (1.0) -> 6.
  EXPECT_EQ(Q5Code(b.data() + 4, 0), 0);
  EXPECT_EQ(Q5Code(b.data() + 4, 17), 31);
  EXPECT_EQ(Q5Code(b.data() + 4, 9), 5);
  EXPECT_EQ(Q5Code(b.data() + 4, 30), 6);
  uint32_t qh;
  std::memcpy(&qh, b.data() + 4, 4);
  EXPECT_EQ(qh, 1u << 17);
  const std::vector<float> x = Decode(DType::kQ5_1, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(x[j], j == 9 ? 0.5f : v[j]) << j;
}

}  // namespace
}  // namespace kvserve::model
