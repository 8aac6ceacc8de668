// Element types of weights and KV cache entries, and scalar conversions between them.
#ifndef KVSERVE_MODEL_DTYPE_H_
#define KVSERVE_MODEL_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvserve::model {

// Numbering is our own (not GGUF's); the GGUF reader maps ggml type ids onto it.
enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // blocks of 32 int8 values sharing one f16 scale: 34 bytes per 32 elements.
};

inline constexpr int kQ8_0BlockElems = 32;
inline constexpr int kQ8_0BlockBytes = 34;

std::string_view DTypeName(DType t);

// The inverse of DTypeName: "f32", "f16", "bf16" or "q8_0"; nullopt for any other name.
std::optional<DType> DTypeFromName(std::string_view name);

// A KV cache element type (KvLayout::dtype) by name: "f32" or "f16". Otherwise
// INVALID_ARGUMENT "<what> must be f32 or f16, got \"<name>\"" (`what` names the input,
// e.g. a flag: "--kv_dtype").
absl::StatusOr<DType> KvDTypeFromName(std::string_view name, std::string_view what);

// Bytes taken by `n` consecutive elements of type `t`. For Q8_0, `n` must be a
// multiple of kQ8_0BlockElems (callers check shapes before asking).
inline size_t DTypeBytes(DType t, size_t n) {
  switch (t) {
    case DType::kF32:
      return n * 4;
    case DType::kF16:
      return n * 2;
    case DType::kBF16:
      return n * 2;
    case DType::kQ8_0:
      return n / kQ8_0BlockElems * kQ8_0BlockBytes;
  }
  return 0;
}

// IEEE half <-> float, exact for every finite value, NaN and infinity.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);  // round to nearest even

inline float BF16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t FloatToBF16(float f);  // round to nearest even, NaN stays NaN

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_DTYPE_H_
