#include "model/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

// GGUF metadata value type ids (GGUF specification).
enum ValueTypeId : uint32_t {
  kGgufUint8 = 0,
  kGgufInt8 = 1,
  kGgufUint16 = 2,
  kGgufInt16 = 3,
  kGgufUint32 = 4,
  kGgufInt32 = 5,
  kGgufFloat32 = 6,
  kGgufBool = 7,
  kGgufString = 8,
  kGgufArray = 9,
  kGgufUint64 = 10,
  kGgufInt64 = 11,
  kGgufFloat64 = 12,
};

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint32_t kGgufVersion = 3;
constexpr char kAlignmentKey[] = "general.alignment";

// ggml tensor type ids.
uint32_t GgmlTypeId(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ8_0:
      return 8;
    case DType::kQ4_0:
      return 2;
    case DType::kQ5_0:
      return 6;
    case DType::kQ5_1:
      return 7;
    case DType::kQ4_K:
      return 12;
    case DType::kQ5_K:
      return 13;
    case DType::kQ6_K:
      return 14;
    case DType::kBF16:
      return 30;
  }
  return 0;
}

// All multi-byte values are written little-endian; this machine family (x86-64,
// aarch64 Linux) is little-endian, which the static_assert below pins down.
static_assert(std::endian::native == std::endian::little, "GGUF writer assumes little-endian");

template <typename T>
void PutPod(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

void PutString(std::string& out, std::string_view s) {
  PutPod<uint64_t>(out, s.size());
  out.append(s.data(), s.size());
}

template <typename T>
std::string Scalar(T v) {
  std::string p;
  PutPod(p, v);
  return p;
}

template <typename T>
std::string Array(uint32_t elem_type, std::span<const T> v) {
  std::string p;
  PutPod<uint32_t>(p, elem_type);
  PutPod<uint64_t>(p, v.size());
  for (const T& x : v) PutPod(p, x);
  return p;
}

uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

// Where bytes go: a file or a string. Errors are sticky.
class GgufWriter::Output {
 public:
  virtual ~Output() = default;
  virtual absl::Status Write(const void* data, size_t n) = 0;
};

class GgufWriter::FileOutput : public GgufWriter::Output {
 public:
  FileOutput(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {
    // A large stdio buffer: producers often append one row (a few KB) at a time.
    buffer_ = std::make_unique<char[]>(kBufferBytes);
    std::setvbuf(f_, buffer_.get(), _IOFBF, kBufferBytes);
  }
  ~FileOutput() override {
    if (f_ != nullptr) std::fclose(f_);
  }
  absl::Status Write(const void* data, size_t n) override {
    if (n != 0 && std::fwrite(data, 1, n, f_) != n) {
      return absl::InternalError(absl::StrCat("writing ", path_, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  absl::Status Close() {
    std::FILE* f = f_;
    f_ = nullptr;
    if (std::fclose(f) != 0) {
      return absl::InternalError(absl::StrCat("closing ", path_, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kBufferBytes = 4 << 20;
  std::FILE* f_;
  std::string path_;
  std::unique_ptr<char[]> buffer_;
};

class GgufWriter::StringOutput : public GgufWriter::Output {
 public:
  absl::Status Write(const void* data, size_t n) override {
    out_.append(static_cast<const char*>(data), n);
    return absl::OkStatus();
  }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

namespace {

// Counts what a producer appends and refuses anything past the declared size.
class CountingSink : public GgufByteSink {
 public:
  CountingSink(std::function<absl::Status(const void*, size_t)> write, uint64_t limit,
               std::string_view name)
      : write_(std::move(write)), limit_(limit), name_(name) {}
  absl::Status Append(const void* data, size_t n) override {
    if (!status_.ok()) return status_;
    if (n > limit_ - written_) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("tensor ", name_, ": producer wrote more than ", limit_, " bytes"));
      return status_;
    }
    status_ = write_(data, n);
    if (status_.ok()) written_ += n;
    return status_;
  }
  uint64_t written() const { return written_; }
  const absl::Status& status() const { return status_; }

 private:
  std::function<absl::Status(const void*, size_t)> write_;
  uint64_t limit_;
  uint64_t written_ = 0;
  std::string name_;
  absl::Status status_;
};

}  // namespace

void GgufWriter::SetRaw(std::string_view key, uint32_t type, std::string payload) {
  for (Entry& e : entries_) {
    if (e.key == key) {
      e.type = type;
      e.payload = std::move(payload);
      return;
    }
  }
  entries_.push_back(Entry{std::string(key), type, std::move(payload)});
}

void GgufWriter::SetUint8(std::string_view key, uint8_t v) { SetRaw(key, kGgufUint8, Scalar(v)); }
void GgufWriter::SetInt8(std::string_view key, int8_t v) { SetRaw(key, kGgufInt8, Scalar(v)); }
void GgufWriter::SetUint16(std::string_view key, uint16_t v) {
  SetRaw(key, kGgufUint16, Scalar(v));
}
void GgufWriter::SetInt16(std::string_view key, int16_t v) { SetRaw(key, kGgufInt16, Scalar(v)); }
void GgufWriter::SetUint32(std::string_view key, uint32_t v) {
  SetRaw(key, kGgufUint32, Scalar(v));
}
void GgufWriter::SetInt32(std::string_view key, int32_t v) { SetRaw(key, kGgufInt32, Scalar(v)); }
void GgufWriter::SetUint64(std::string_view key, uint64_t v) {
  SetRaw(key, kGgufUint64, Scalar(v));
}
void GgufWriter::SetInt64(std::string_view key, int64_t v) { SetRaw(key, kGgufInt64, Scalar(v)); }
void GgufWriter::SetFloat32(std::string_view key, float v) { SetRaw(key, kGgufFloat32, Scalar(v)); }
void GgufWriter::SetFloat64(std::string_view key, double v) {
  SetRaw(key, kGgufFloat64, Scalar(v));
}
void GgufWriter::SetBool(std::string_view key, bool v) {
  SetRaw(key, kGgufBool, Scalar<uint8_t>(v ? 1 : 0));
}
void GgufWriter::SetString(std::string_view key, std::string_view v) {
  std::string p;
  PutString(p, v);
  SetRaw(key, kGgufString, std::move(p));
}

void GgufWriter::SetUint8Array(std::string_view key, std::span<const uint8_t> v) {
  SetRaw(key, kGgufArray, Array(kGgufUint8, v));
}
void GgufWriter::SetInt8Array(std::string_view key, std::span<const int8_t> v) {
  SetRaw(key, kGgufArray, Array(kGgufInt8, v));
}
void GgufWriter::SetUint16Array(std::string_view key, std::span<const uint16_t> v) {
  SetRaw(key, kGgufArray, Array(kGgufUint16, v));
}
void GgufWriter::SetInt16Array(std::string_view key, std::span<const int16_t> v) {
  SetRaw(key, kGgufArray, Array(kGgufInt16, v));
}
void GgufWriter::SetUint32Array(std::string_view key, std::span<const uint32_t> v) {
  SetRaw(key, kGgufArray, Array(kGgufUint32, v));
}
void GgufWriter::SetInt32Array(std::string_view key, std::span<const int32_t> v) {
  SetRaw(key, kGgufArray, Array(kGgufInt32, v));
}
void GgufWriter::SetUint64Array(std::string_view key, std::span<const uint64_t> v) {
  SetRaw(key, kGgufArray, Array(kGgufUint64, v));
}
void GgufWriter::SetInt64Array(std::string_view key, std::span<const int64_t> v) {
  SetRaw(key, kGgufArray, Array(kGgufInt64, v));
}
void GgufWriter::SetFloat32Array(std::string_view key, std::span<const float> v) {
  SetRaw(key, kGgufArray, Array(kGgufFloat32, v));
}
void GgufWriter::SetFloat64Array(std::string_view key, std::span<const double> v) {
  SetRaw(key, kGgufArray, Array(kGgufFloat64, v));
}
void GgufWriter::SetBoolArray(std::string_view key, std::span<const bool> v) {
  std::string p;
  PutPod<uint32_t>(p, kGgufBool);
  PutPod<uint64_t>(p, v.size());
  for (bool b : v) PutPod<uint8_t>(p, b ? 1 : 0);
  SetRaw(key, kGgufArray, std::move(p));
}
void GgufWriter::SetStringArray(std::string_view key, std::span<const std::string> v) {
  std::string p;
  PutPod<uint32_t>(p, kGgufString);
  PutPod<uint64_t>(p, v.size());
  for (const std::string& s : v) PutString(p, s);
  SetRaw(key, kGgufArray, std::move(p));
}

uint64_t GgufWriter::TensorBytes(DType type, std::span<const uint64_t> dims) {
  if (dims.empty() || dims.size() > 4) return 0;
  uint64_t elements = 1;
  for (uint64_t d : dims) {
    if (d == 0 || d > (uint64_t{1} << 40) / elements) return 0;  // also guards overflow
    elements *= d;
  }
  if (dims[0] % static_cast<uint64_t>(DTypeBlockElems(type)) != 0) return 0;
  return DTypeBytes(type, elements);
}

absl::Status GgufWriter::AddTensor(std::string_view name, DType type, std::vector<uint64_t> dims,
                                   GgufTensorProducer producer) {
  if (name.empty()) return absl::InvalidArgumentError("tensor name is empty");
  for (const TensorEntry& t : tensors_) {
    if (t.name == name) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name ", std::string(name)));
    }
  }
  const uint64_t bytes = TensorBytes(type, dims);
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", std::string(name), ": invalid shape (", dims.size(),
                     " dims) for type ", std::string(DTypeName(type))));
  }
  if (!producer) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", std::string(name), ": no producer"));
  }
  tensors_.push_back(
      TensorEntry{std::string(name), type, std::move(dims), bytes, std::move(producer)});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensorBytes(std::string_view name, DType type,
                                        std::vector<uint64_t> dims,
                                        std::span<const uint8_t> bytes) {
  auto copy = std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.end());
  return AddTensor(name, type, std::move(dims),
                   [copy](GgufByteSink& sink) { return sink.Append(copy->data(), copy->size()); });
}

absl::Status GgufWriter::Validate() const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("alignment ", alignment_, " is not a power of two"));
  }
  for (const Entry& e : entries_) {
    if (e.key.empty()) return absl::InvalidArgumentError("metadata key is empty");
    if (e.key == kAlignmentKey &&
        (e.type != kGgufUint32 || e.payload != Scalar<uint32_t>(alignment_))) {
      return absl::InvalidArgumentError(absl::StrCat(
          kAlignmentKey, " must be a u32 equal to the writer's alignment ", alignment_));
    }
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::WriteTo(Output& out) {
  if (absl::Status s = Validate(); !s.ok()) return s;
  bool has_alignment = false;
  for (const Entry& e : entries_) has_alignment |= e.key == kAlignmentKey;

  // Header, metadata and tensor infos are small: build them in memory.
  std::string head;
  PutPod<uint32_t>(head, kGgufMagic);
  PutPod<uint32_t>(head, kGgufVersion);
  PutPod<uint64_t>(head, tensors_.size());
  PutPod<uint64_t>(head, entries_.size() + (has_alignment ? 0 : 1));
  auto put_entry = [&head](std::string_view key, uint32_t type, const std::string& payload) {
    PutString(head, key);
    PutPod<uint32_t>(head, type);
    head += payload;
  };
  for (const Entry& e : entries_) put_entry(e.key, e.type, e.payload);
  if (!has_alignment) put_entry(kAlignmentKey, kGgufUint32, Scalar<uint32_t>(alignment_));

  uint64_t offset = 0;
  for (const TensorEntry& t : tensors_) {
    PutString(head, t.name);
    PutPod<uint32_t>(head, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) PutPod<uint64_t>(head, d);
    PutPod<uint32_t>(head, GgmlTypeId(t.type));
    PutPod<uint64_t>(head, offset);
    offset = AlignUp(offset + t.bytes, alignment_);
  }
  head.resize(AlignUp(head.size(), alignment_), '\0');
  if (absl::Status s = out.Write(head.data(), head.size()); !s.ok()) return s;

  static constexpr char kZeros[256] = {};
  for (TensorEntry& t : tensors_) {
    CountingSink sink([&out](const void* d, size_t n) { return out.Write(d, n); }, t.bytes, t.name);
    GgufTensorProducer producer = std::move(t.producer);
    if (!producer) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor ", t.name, ": producer already consumed by an earlier write"));
    }
    absl::Status s = producer(sink);
    if (s.ok()) s = sink.status();
    if (!s.ok()) return s;
    if (sink.written() != t.bytes) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, ": producer wrote ",
                                                     sink.written(), " bytes, expected ", t.bytes));
    }
    const uint64_t pad = AlignUp(t.bytes, alignment_) - t.bytes;
    for (uint64_t left = pad; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, sizeof(kZeros)));
      if (absl::Status w = out.Write(kZeros, n); !w.ok()) return w;
      left -= n;
    }
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::WriteToFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    const int err = errno;
    const std::string msg = absl::StrCat("cannot create ", path, ": ", std::strerror(err));
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    if (err == ENOENT) return absl::NotFoundError(msg);
    return absl::InternalError(msg);
  }
  FileOutput out(f, path);
  absl::Status s = WriteTo(out);
  absl::Status c = out.Close();
  if (s.ok()) s = c;
  if (!s.ok()) {
    std::remove(path.c_str());
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GgufWriter::WriteToString() {
  StringOutput out;
  if (absl::Status s = WriteTo(out); !s.ok()) return s;
  return std::move(out.str());
}

}  // namespace kvserve::model
