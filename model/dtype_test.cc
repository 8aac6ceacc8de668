// Known answers for the 16-bit conversions (values from the IEEE 754 binary16 and
// bfloat16 encodings, worked by hand), plus an exhaustive round trip.
#include "model/dtype.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace kvserve::model {
namespace {

TEST(HalfTest, KnownEncodings) {
  struct Case {
    uint16_t bits;
    float value;
  };
  for (const Case& c :
       {Case{0x0000, 0.0f}, Case{0x3C00, 1.0f}, Case{0xC000, -2.0f}, Case{0x3555, 0.333251953125f},
        Case{0x7BFF, 65504.0f}, Case{0x0400, 6.103515625e-05f},  // smallest normal
        Case{0x0001, 5.9604644775390625e-08f},                   // smallest subnormal
        Case{0x03FF, 6.097555160522461e-05f}}) {                 // largest subnormal
    EXPECT_EQ(HalfToFloat(c.bits), c.value) << std::hex << c.bits;
    EXPECT_EQ(FloatToHalf(c.value), c.bits) << c.value;
  }
  EXPECT_EQ(HalfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7C00);   // overflow -> infinity
  EXPECT_EQ(FloatToHalf(1e-9f), 0x0000);  // underflow -> zero
  EXPECT_EQ(FloatToHalf(std::nanf("")) & 0x7C00, 0x7C00);
  EXPECT_NE(FloatToHalf(std::nanf("")) & 0x03FF, 0);
  // Round to nearest even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 -> 1 (even);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9 -> 1 + 2^-9 (even).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
}

TEST(HalfTest, EveryFiniteHalfRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    if ((h & 0x7C00) == 0x7C00) continue;  // infinities and NaNs: checked above
    ASSERT_EQ(FloatToHalf(HalfToFloat(h)), h) << std::hex << bits;
  }
}

TEST(BF16Test, KnownEncodings) {
  EXPECT_EQ(BF16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(BF16ToFloat(0xC040), -3.0f);
  EXPECT_EQ(FloatToBF16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBF16(3.140625f), 0x4049);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> 1 (even); 1 + 3 * 2^-8 -> 1 + 2^-6.
  EXPECT_EQ(FloatToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(FloatToBF16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(std::nanf("")))));
  EXPECT_EQ(BF16ToFloat(FloatToBF16(std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
}

TEST(DTypeNameTest, FromNameInvertsName) {
  for (DType t : kAllDTypes) {
    EXPECT_EQ(DTypeFromName(DTypeName(t)), t) << DTypeName(t);
  }
  EXPECT_EQ(DTypeFromName("F32"), std::nullopt);
  EXPECT_EQ(DTypeFromName(""), std::nullopt);
  EXPECT_EQ(DTypeFromName("unknown"), std::nullopt);
}

TEST(DTypeBytesTest, BlockGeometryMatchesGgml) {
  // sizeof(block_q8_0) = 34, block_q4_0 = 18, block_q4_K = 144, block_q5_K = 176,
  // block_q6_K = 210, block_q5_0 = 22, block_q5_1 = 24.
  EXPECT_EQ(DTypeBytes(DType::kF32, 3), 12u);
  EXPECT_EQ(DTypeBytes(DType::kBF16, 3), 6u);
  EXPECT_EQ(DTypeBytes(DType::kQ8_0, 64), 68u);
  EXPECT_EQ(DTypeBytes(DType::kQ4_0, 64), 36u);
  EXPECT_EQ(DTypeBytes(DType::kQ4_K, 512), 288u);
  EXPECT_EQ(DTypeBytes(DType::kQ5_0, 96), 66u);
  EXPECT_EQ(DTypeBytes(DType::kQ5_1, 96), 72u);
  EXPECT_EQ(DTypeBlockElems(DType::kQ5_1), 32);
  EXPECT_EQ(DTypeBytes(DType::kQ5_K, 512), 352u);
  EXPECT_EQ(DTypeBytes(DType::kQ6_K, 768), 630u);
  EXPECT_FALSE(IsQuantized(DType::kF16));
  EXPECT_TRUE(IsQuantized(DType::kQ4_K));
}

TEST(DTypeNameTest, KvDTypeFromNameTakesOnlyKvTypes) {
  EXPECT_EQ(KvDTypeFromName("f32", "--kv_dtype").value(), DType::kF32);
  EXPECT_EQ(KvDTypeFromName("f16", "--kv_dtype").value(), DType::kF16);
  for (const char* bad : {"bf16", "q8_0", "q4", ""}) {
    const absl::StatusOr<DType> t = KvDTypeFromName(bad, "--kv_dtype");
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(t.status().message(),
              std::string("--kv_dtype must be f32 or f16, got \"") + bad + "\"");
  }
}

}  // namespace
}  // namespace kvserve::model
