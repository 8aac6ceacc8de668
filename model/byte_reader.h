// A cursor over an untrusted byte span: every read is bounds-checked.
#ifndef KVSERVE_MODEL_BYTE_READER_H_
#define KVSERVE_MODEL_BYTE_READER_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>

namespace kvserve::model {

// The file formats we read are little-endian; so is every machine we build for.
static_assert(std::endian::native == std::endian::little, "kvserve readers assume little-endian");

// Reads little-endian scalars and byte runs from a span it does not own.
// Invariant: offset() <= size(). A failed read returns false and leaves the
// offset unchanged, so the caller can report where the data ran out.
// Not thread-safe; cheap to copy.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  size_t offset() const { return offset_; }
  size_t size() const { return bytes_.size(); }
  size_t remaining() const { return bytes_.size() - offset_; }

  // Reads one trivially copyable value (an integer or a float) of sizeof(T) bytes.
  template <typename T>
  bool Read(T* out) {
    static_assert(std::is_arithmetic_v<T>);
    if (remaining() < sizeof(T)) return false;
    std::memcpy(out, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return true;
  }

  // Points `out` at the next `n` bytes (no copy) and moves past them.
  bool ReadBytes(uint64_t n, std::span<const uint8_t>* out) {
    if (n > remaining()) return false;
    *out = bytes_.subspan(offset_, static_cast<size_t>(n));
    offset_ += static_cast<size_t>(n);
    return true;
  }

  bool ReadString(uint64_t n, std::string_view* out) {
    std::span<const uint8_t> b;
    if (!ReadBytes(n, &b)) return false;
    *out = std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
    return true;
  }

  bool Skip(uint64_t n) {
    if (n > remaining()) return false;
    offset_ += static_cast<size_t>(n);
    return true;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t offset_ = 0;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_BYTE_READER_H_
