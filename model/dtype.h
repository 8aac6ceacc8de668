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
  // Block-quantized types, laid out exactly as ggml's block_* structs (ggml-common.h);
  // model/quant.h decodes and encodes them.
  kQ8_0,  // ggml type 8, 34 bytes per 32 elements: f16 d, int8 q[32]; x = d * q.
  kQ4_0,  // ggml type 2, 18 bytes per 32 elements: f16 d, uint8 qs[16] (element j in the
          // low nibble of qs[j], element j + 16 in the high nibble); x = d * (q - 8).
  kQ4_K,  // ggml type 12, 144 bytes per 256 elements: f16 d, f16 dmin, 12 bytes of 6-bit
          // scales and mins for 8 sub-blocks of 32, uint8 qs[128] (4-bit quants);
          // x = d * scale * q - dmin * min.
  kQ6_K,  // ggml type 14, 210 bytes per 256 elements: uint8 ql[128] (low 4 bits),
          // uint8 qh[64] (high 2 bits), int8 scales[16] (one per 16 elements), f16 d;
          // x = d * scale * (q - 32).
  // (Appended, so the numbering of the types above stays: benchmarks name types by it.)
  kQ5_K,  // ggml type 13, 176 bytes per 256 elements: f16 d, f16 dmin, 12 bytes of 6-bit
          // scales and mins (as q4_K), uint8 qh[32] (the fifth bits), uint8 qs[128] (the
          // low 4 bits, as q4_K's); x = d * scale * q - dmin * min, q in [0, 31].
  kQ5_0,  // ggml type 6, 22 bytes per 32 elements: f16 d, uint8 qh[4] (the fifth bits: bit j
          // of the little-endian 32-bit qh for element j), uint8 qs[16] (the low 4 bits, as
          // q4_0's); x = d * (q - 16), q in [0, 31].
  kQ5_1,  // ggml type 7, 24 bytes per 32 elements: f16 d, f16 m, then qh[4] and qs[16] as
          // q5_0; x = d * q + m, q in [0, 31].
};

inline constexpr int kQ8_0BlockElems = 32;
inline constexpr int kQ8_0BlockBytes = 34;
inline constexpr int kQ4_0BlockElems = 32;
inline constexpr int kQ4_0BlockBytes = 18;
inline constexpr int kQ5_0BlockBytes = 22;
inline constexpr int kQ5_1BlockBytes = 24;
inline constexpr int kQKBlockElems = 256;  // QK_K: the super-block of the k-quants
inline constexpr int kQ4_KBlockBytes = 144;
inline constexpr int kQ5_KBlockBytes = 176;
inline constexpr int kQ6_KBlockBytes = 210;

// Elements per block: 1 for f32, f16 and bf16; 32 or 256 for the quantized types. A row
// of a quantized matrix must be a whole number of blocks.
inline constexpr int DTypeBlockElems(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return 1;
    case DType::kQ8_0:
      return kQ8_0BlockElems;
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
      return kQ4_0BlockElems;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return kQKBlockElems;
  }
  return 1;
}

// Bytes per block (per element for f32, f16 and bf16).
inline constexpr int DTypeBlockBytes(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kQ8_0:
      return kQ8_0BlockBytes;
    case DType::kQ4_0:
      return kQ4_0BlockBytes;
    case DType::kQ5_0:
      return kQ5_0BlockBytes;
    case DType::kQ5_1:
      return kQ5_1BlockBytes;
    case DType::kQ4_K:
      return kQ4_KBlockBytes;
    case DType::kQ5_K:
      return kQ5_KBlockBytes;
    case DType::kQ6_K:
      return kQ6_KBlockBytes;
  }
  return 0;
}

inline constexpr bool IsQuantized(DType t) { return DTypeBlockElems(t) > 1; }

// Every DType, for loops over all of them (tests, name lookup).
inline constexpr DType kAllDTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                                       DType::kQ4_0, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                                       DType::kQ5_K, DType::kQ6_K};

std::string_view DTypeName(DType t);

// The inverse of DTypeName: "f32", "f16", "bf16", "q8_0", "q4_0", "q5_0", "q5_1", "q4_k",
// "q5_k" or "q6_k"; nullopt for any other name.
std::optional<DType> DTypeFromName(std::string_view name);

// A KV cache element type (KvLayout::dtype) by name: "f32" or "f16". Otherwise
// INVALID_ARGUMENT "<what> must be f32 or f16, got \"<name>\"" (`what` names the input,
// e.g. a flag: "--kv_dtype").
absl::StatusOr<DType> KvDTypeFromName(std::string_view name, std::string_view what);

// Bytes taken by `n` consecutive elements of type `t`. For a quantized type, `n` must be
// a multiple of DTypeBlockElems(t) (callers check shapes before asking).
inline size_t DTypeBytes(DType t, size_t n) {
  return n / static_cast<size_t>(DTypeBlockElems(t)) * static_cast<size_t>(DTypeBlockBytes(t));
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
