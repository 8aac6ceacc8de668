// The GGUF container (llama.cpp's model file format, versions 2 and 3, little-endian):
// metadata key/values and tensor descriptors, parsed from untrusted bytes.
//
// Layout: "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv x (string key, u32 type,
// value), n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type,
// u64 offset), padding to general.alignment (default 32), tensor data. A string is
// u64 length + bytes; an array is u32 element type + u64 count + elements.
#ifndef KVSERVE_MODEL_GGUF_H_
#define KVSERVE_MODEL_GGUF_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/dtype.h"
#include "model/mapped_file.h"

namespace kvserve::model {

// Metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view GgufTypeName(GgufType t);

// ggml tensor type ids that map onto DType.
inline constexpr uint32_t kGgmlTypeF32 = 0;
inline constexpr uint32_t kGgmlTypeF16 = 1;
inline constexpr uint32_t kGgmlTypeQ4_0 = 2;
inline constexpr uint32_t kGgmlTypeQ5_0 = 6;
inline constexpr uint32_t kGgmlTypeQ5_1 = 7;
inline constexpr uint32_t kGgmlTypeQ8_0 = 8;
inline constexpr uint32_t kGgmlTypeQ4_K = 12;
inline constexpr uint32_t kGgmlTypeQ5_K = 13;
inline constexpr uint32_t kGgmlTypeQ6_K = 14;
inline constexpr uint32_t kGgmlTypeBF16 = 30;

// One metadata value. Strings and scalar arrays point into the parsed bytes (no
// copies), so a value must not outlive them. Immutable after parsing.
class GgufValue {
 public:
  GgufType type() const { return type_; }

  // Scalar accessors: nullopt when the value is not of that kind.
  std::optional<int64_t> AsInt() const;   // any integer type whose value fits in int64
  std::optional<double> AsFloat() const;  // float32, float64
  std::optional<bool> AsBool() const;
  std::optional<std::string_view> AsString() const;

  // Array accessors (type() == kArray). Element accessors return nullopt /
  // nullptr when `i` is out of range or the element is not of that kind.
  GgufType elem_type() const { return elem_type_; }
  uint64_t size() const { return count_; }
  std::optional<int64_t> IntAt(uint64_t i) const;
  std::optional<double> FloatAt(uint64_t i) const;
  std::optional<std::string_view> StringAt(uint64_t i) const;
  const GgufValue* ArrayAt(uint64_t i) const;

  // "uint32", "string", "array of float32", ...
  std::string Describe() const;

 private:
  friend class GgufParser;

  GgufType type_ = GgufType::kUint8;
  GgufType elem_type_ = GgufType::kUint8;  // arrays only
  uint64_t count_ = 0;                     // arrays only
  std::span<const uint8_t> raw_;           // a scalar's bytes, or an array of scalars' bytes
  std::string_view str_;                   // kString
  std::vector<std::string_view> strings_;  // array of strings
  std::vector<GgufValue> arrays_;          // array of arrays
};

struct GgufTensorInfo {
  std::string_view name;
  uint32_t ggml_type = 0;
  DType dtype = DType::kF32;
  int n_dims = 0;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};  // ne[0] varies fastest (columns)
  uint64_t offset = 0;                       // from the start of the tensor data section
  uint64_t size_bytes = 0;
  const uint8_t* data = nullptr;  // into the parsed bytes

  int64_t cols() const { return ne[0]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
};

// A parsed GGUF container. Points into the bytes it was parsed from.
struct GgufFile {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // absolute offset of the tensor data section
  std::vector<std::pair<std::string_view, GgufValue>> metadata;  // file order
  std::vector<GgufTensorInfo> tensors;                           // file order

  const GgufValue* FindMetadata(std::string_view key) const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;

 private:
  friend class GgufParser;
  absl::flat_hash_map<std::string_view, size_t> metadata_index_;
  absl::flat_hash_map<std::string_view, size_t> tensor_index_;
};

// Limits the parser enforces besides "fits in the file".
inline constexpr int kGgufMaxArrayDepth = 8;  // nesting of arrays of arrays
inline constexpr int kGgufMaxDims = 4;

// Parses and validates a GGUF container held in `bytes`, which must stay alive
// (and unmodified) as long as the result is used, and start at an address aligned
// to at least 4 bytes (mmap and malloc both are).
//
// Checks: magic, version 2 or 3, every count / length against the bytes left
// (absurd counts fail before anything is allocated), metadata types, array nesting
// depth, duplicate keys and tensor names, general.alignment (a power of two), tensor
// dims (1..4, positive, product without overflow), tensor type (F32, F16, BF16, Q8_0,
// Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; others fail naming the tensor and type id; a row a whole
// number of blocks), offsets aligned and every tensor's bytes inside the file. Errors are
// INVALID_ARGUMENT naming the problem; anything truncated says "end of file".
absl::StatusOr<GgufFile> ParseGguf(std::span<const uint8_t> bytes);

// A GGUF file mapped from disk with its parsed container.
struct MappedGguf {
  std::shared_ptr<const MappedFile> file;  // keeps `gguf`'s pointers valid
  GgufFile gguf;
};

// Maps `path` and parses it. NOT_FOUND for a missing file; parse errors are
// prefixed with the path.
absl::StatusOr<MappedGguf> OpenGguf(const std::string& path);

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_GGUF_H_
