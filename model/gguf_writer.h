// Writes GGUF v3 files (llama.cpp's model format): typed metadata and tensors, with
// tensor bytes streamed from producers so a multi-GB model is never held in memory.
#ifndef KVSERVE_MODEL_GGUF_WRITER_H_
#define KVSERVE_MODEL_GGUF_WRITER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/dtype.h"

namespace kvserve::model {

// Receives the bytes of one tensor, in order, from a TensorProducer.
class GgufByteSink {
 public:
  virtual ~GgufByteSink() = default;
  // Appends `n` bytes. Fails (and keeps failing) on an I/O error or when the producer
  // writes past the tensor's declared size.
  virtual absl::Status Append(const void* data, size_t n) = 0;
};

// Produces exactly the declared byte size of one tensor into the sink, e.g. row by row.
// Called once, during Write*, in the order the tensors were added.
using GgufTensorProducer = std::function<absl::Status(GgufByteSink&)>;

// Builds one GGUF file. Usage: Set* metadata, AddTensor* tensors, then WriteToFile (or
// WriteToString for small files and tests). Layout written (GGUF v3, little-endian):
//   "GGUF", u32 version=3, u64 tensor_count, u64 kv_count, kv pairs, tensor infos,
//   zero padding to `alignment`, then each tensor's bytes at its offset (a multiple of
//   `alignment` from the start of the data section), each padded to `alignment`.
// Metadata keys keep the order of their first Set*; setting a key again replaces its
// value in place. "general.alignment" (u32) is added automatically unless set; when set
// it must equal the writer's alignment.
//
// Threading: not thread-safe; one thread builds and writes. Producers run on the
// calling thread of Write*.
class GgufWriter {
 public:
  static constexpr uint32_t kDefaultAlignment = 32;

  // `alignment` must be a power of two (checked by Write*).
  explicit GgufWriter(uint32_t alignment = kDefaultAlignment) : alignment_(alignment) {}

  void SetUint8(std::string_view key, uint8_t v);
  void SetInt8(std::string_view key, int8_t v);
  void SetUint16(std::string_view key, uint16_t v);
  void SetInt16(std::string_view key, int16_t v);
  void SetUint32(std::string_view key, uint32_t v);
  void SetInt32(std::string_view key, int32_t v);
  void SetUint64(std::string_view key, uint64_t v);
  void SetInt64(std::string_view key, int64_t v);
  void SetFloat32(std::string_view key, float v);
  void SetFloat64(std::string_view key, double v);
  void SetBool(std::string_view key, bool v);
  void SetString(std::string_view key, std::string_view v);

  void SetUint8Array(std::string_view key, std::span<const uint8_t> v);
  void SetInt8Array(std::string_view key, std::span<const int8_t> v);
  void SetUint16Array(std::string_view key, std::span<const uint16_t> v);
  void SetInt16Array(std::string_view key, std::span<const int16_t> v);
  void SetUint32Array(std::string_view key, std::span<const uint32_t> v);
  void SetInt32Array(std::string_view key, std::span<const int32_t> v);
  void SetUint64Array(std::string_view key, std::span<const uint64_t> v);
  void SetInt64Array(std::string_view key, std::span<const int64_t> v);
  void SetFloat32Array(std::string_view key, std::span<const float> v);
  void SetFloat64Array(std::string_view key, std::span<const double> v);
  void SetBoolArray(std::string_view key, std::span<const bool> v);
  void SetStringArray(std::string_view key, std::span<const std::string> v);

  // Declares a tensor. `dims` are in GGUF (ggml) order: dims[0] is the contiguous
  // dimension, so a row-major matrix [rows, cols] has dims {cols, rows}. 1 to 4 dims,
  // each >= 1. `type` is any DType (dims[0] a multiple of DTypeBlockElems(type)).
  // INVALID_ARGUMENT for an empty or duplicate name, or a bad shape. The producer
  // must write exactly TensorBytes(type, dims) bytes.
  absl::Status AddTensor(std::string_view name, DType type, std::vector<uint64_t> dims,
                         GgufTensorProducer producer);
  // Same, with the bytes given up front (copied).
  absl::Status AddTensorBytes(std::string_view name, DType type, std::vector<uint64_t> dims,
                              std::span<const uint8_t> bytes);

  // Bytes of a tensor of `type` and `dims`, or 0 when the shape is invalid.
  static uint64_t TensorBytes(DType type, std::span<const uint64_t> dims);

  // Writes the file (truncating any existing one). On failure the partial file is
  // removed and the status names the path: INVALID_ARGUMENT for bad metadata or a
  // producer that wrote the wrong number of bytes, the producer's own error, or
  // INTERNAL/PERMISSION_DENIED/NOT_FOUND for I/O. Producers are consumed: call once.
  absl::Status WriteToFile(const std::string& path);
  // Same, into memory (for tests and small files).
  absl::StatusOr<std::string> WriteToString();

 private:
  class Output;
  class FileOutput;
  class StringOutput;

  struct Entry {
    std::string key;
    uint32_t type = 0;    // GGUF value type id
    std::string payload;  // serialized value (without key and type)
  };
  struct TensorEntry {
    std::string name;
    DType type = DType::kF32;
    std::vector<uint64_t> dims;
    uint64_t bytes = 0;
    GgufTensorProducer producer;
  };

  void SetRaw(std::string_view key, uint32_t type, std::string payload);
  absl::Status Validate() const;
  absl::Status WriteTo(Output& out);

  uint32_t alignment_;
  std::vector<Entry> entries_;
  std::vector<TensorEntry> tensors_;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_GGUF_WRITER_H_
