#include "model/gguf.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/byte_reader.h"

namespace kvserve::model {
namespace {

constexpr uint32_t kMaxGgufType = 12;

// Byte size of a scalar metadata type; 0 for string and array.
size_t ScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

// The fewest bytes one element of type `t` takes in the file; bounds counts before
// anything is allocated.
size_t MinEncodedSize(GgufType t) {
  if (t == GgufType::kString) return 8;  // u64 length
  if (t == GgufType::kArray) return 12;  // u32 type + u64 count
  return ScalarSize(t);
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::optional<int64_t> IntFromRaw(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::kUint8:
      return Load<uint8_t>(p);
    case GgufType::kInt8:
      return Load<int8_t>(p);
    case GgufType::kUint16:
      return Load<uint16_t>(p);
    case GgufType::kInt16:
      return Load<int16_t>(p);
    case GgufType::kUint32:
      return Load<uint32_t>(p);
    case GgufType::kInt32:
      return Load<int32_t>(p);
    case GgufType::kInt64:
      return Load<int64_t>(p);
    case GgufType::kUint64: {
      const uint64_t v = Load<uint64_t>(p);
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(v);
    }
    default:
      return std::nullopt;
  }
}

std::optional<double> FloatFromRaw(GgufType t, const uint8_t* p) {
  if (t == GgufType::kFloat32) return Load<float>(p);
  if (t == GgufType::kFloat64) return Load<double>(p);
  return std::nullopt;
}

std::string_view GgmlTypeName(uint32_t id) {
  static constexpr std::string_view kNames[] = {
      "f32",     "f16",    "q4_0",    "q4_1",  "type 4", "type 5", "q5_0",  "q5_1",
      "q8_0",    "q8_1",   "q2_K",    "q3_K",  "q4_K",   "q5_K",   "q6_K",  "q8_K",
      "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s",  "iq2_s", "iq4_xs",
      "i8",      "i16",    "i32",     "i64",   "f64",    "iq1_m",  "bf16"};
  if (id < std::size(kNames)) return kNames[id];
  return "unknown";
}

std::optional<DType> DTypeFromGgml(uint32_t id) {
  switch (id) {
    case kGgmlTypeF32:
      return DType::kF32;
    case kGgmlTypeF16:
      return DType::kF16;
    case kGgmlTypeQ8_0:
      return DType::kQ8_0;
    case kGgmlTypeQ4_0:
      return DType::kQ4_0;
    case kGgmlTypeQ5_0:
      return DType::kQ5_0;
    case kGgmlTypeQ5_1:
      return DType::kQ5_1;
    case kGgmlTypeQ4_K:
      return DType::kQ4_K;
    case kGgmlTypeQ5_K:
      return DType::kQ5_K;
    case kGgmlTypeQ6_K:
      return DType::kQ6_K;
    case kGgmlTypeBF16:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

// Names from the file are untrusted: escape them and cap their length for messages.
std::string Printable(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out = absl::CHexEscape(std::string(s.substr(0, kMax)));
  if (s.size() > kMax) absl::StrAppend(&out, "...");
  return out;
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

std::string_view GgufTypeName(GgufType t) {
  static constexpr std::string_view kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                                "int32",  "float32", "bool",   "string", "array",
                                                "uint64", "int64",   "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i <= kMaxGgufType ? kNames[i] : "invalid";
}

std::optional<int64_t> GgufValue::AsInt() const { return IntFromRaw(type_, raw_.data()); }
std::optional<double> GgufValue::AsFloat() const { return FloatFromRaw(type_, raw_.data()); }

std::optional<bool> GgufValue::AsBool() const {
  if (type_ != GgufType::kBool) return std::nullopt;
  return raw_[0] != 0;
}

std::optional<std::string_view> GgufValue::AsString() const {
  if (type_ != GgufType::kString) return std::nullopt;
  return str_;
}

std::optional<int64_t> GgufValue::IntAt(uint64_t i) const {
  if (type_ != GgufType::kArray || i >= count_ || ScalarSize(elem_type_) == 0) return std::nullopt;
  return IntFromRaw(elem_type_, raw_.data() + i * ScalarSize(elem_type_));
}

std::optional<double> GgufValue::FloatAt(uint64_t i) const {
  if (type_ != GgufType::kArray || i >= count_ || ScalarSize(elem_type_) == 0) return std::nullopt;
  return FloatFromRaw(elem_type_, raw_.data() + i * ScalarSize(elem_type_));
}

std::optional<std::string_view> GgufValue::StringAt(uint64_t i) const {
  if (type_ != GgufType::kArray || elem_type_ != GgufType::kString || i >= count_) {
    return std::nullopt;
  }
  return strings_[i];
}

const GgufValue* GgufValue::ArrayAt(uint64_t i) const {
  if (type_ != GgufType::kArray || elem_type_ != GgufType::kArray || i >= count_) return nullptr;
  return &arrays_[i];
}

std::string GgufValue::Describe() const {
  if (type_ != GgufType::kArray) return std::string(GgufTypeName(type_));
  return absl::StrCat("array of ", std::string(GgufTypeName(elem_type_)));
}

const GgufValue* GgufFile::FindMetadata(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors[it->second];
}

// One parse of one byte span; holds the cursor and builds the GgufFile.
class GgufParser {
 public:
  explicit GgufParser(std::span<const uint8_t> bytes) : bytes_(bytes), r_(bytes) {}

  absl::StatusOr<GgufFile> Parse() {
    GgufFile f;
    if (absl::Status s = ParseHeader(f); !s.ok()) return s;
    uint64_t n_tensors = 0, n_kv = 0;
    if (!r_.Read(&n_tensors)) return EndOfFile("tensor count");
    if (!r_.Read(&n_kv)) return EndOfFile("metadata count");
    // Bound both counts by what the rest of the file could hold before reserving.
    if (n_kv > r_.remaining() / (8 + 4 + 1)) {
      return Invalid(absl::StrCat("metadata count ", n_kv, " cannot fit before end of file (",
                                  r_.remaining(), " bytes left)"));
    }
    if (n_tensors > r_.remaining() / (8 + 4 + 4 + 8)) {
      return Invalid(absl::StrCat("tensor count ", n_tensors, " cannot fit before end of file (",
                                  r_.remaining(), " bytes left)"));
    }
    f.metadata.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      if (absl::Status s = ParseKeyValue(f, i); !s.ok()) return s;
    }
    if (absl::Status s = ReadAlignment(f); !s.ok()) return s;
    f.tensors.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      if (absl::Status s = ParseTensorInfo(f, i); !s.ok()) return s;
    }
    return PlaceTensors(std::move(f));
  }

 private:
  absl::Status Invalid(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

  absl::Status EndOfFile(std::string_view what) {
    return Invalid(absl::StrCat("unexpected end of file reading ", std::string(what), " at offset ",
                                r_.offset(), " (file size ", r_.size(), ")"));
  }

  absl::Status ParseHeader(GgufFile& f) {
    std::span<const uint8_t> magic;
    if (!r_.ReadBytes(4, &magic)) return EndOfFile("magic");
    if (std::memcmp(magic.data(), "GGUF", 4) != 0) {
      return Invalid(
          absl::StrFormat("not a GGUF file (magic %02x %02x %02x %02x, expected \"GGUF\")",
                          magic[0], magic[1], magic[2], magic[3]));
    }
    if (!r_.Read(&f.version)) return EndOfFile("version");
    if (f.version == 1) return Invalid("GGUF version 1 is not supported (only versions 2 and 3)");
    if (f.version != 2 && f.version != 3) {
      if ((f.version & 0xffffu) == 0) {
        return Invalid(
            absl::StrFormat("GGUF file is big-endian (version field 0x%08x); only "
                            "little-endian files are supported",
                            f.version));
      }
      return Invalid(
          absl::StrCat("unsupported GGUF version ", f.version, " (only versions 2 and 3)"));
    }
    return absl::OkStatus();
  }

  static constexpr uint64_t kNoIndex = ~uint64_t{0};

  static std::string Indexed(std::string_view what, uint64_t index) {
    if (index == kNoIndex) return std::string(what);
    return absl::StrCat(std::string(what), "[", index, "]");
  }

  // Reads a u64-length-prefixed string; `what` (element `index` of it, if given)
  // names it for errors. Builds no message on success: vocabularies have 100k+ strings.
  absl::Status ReadString(std::string_view what, std::string_view* out, uint64_t index = kNoIndex) {
    uint64_t len = 0;
    if (!r_.Read(&len)) return EndOfFile(absl::StrCat(Indexed(what, index), " length"));
    if (len > r_.remaining()) {
      return Invalid(absl::StrCat(Indexed(what, index), " length ", len, " at offset ",
                                  r_.offset() - 8, " extends past end of file (", r_.remaining(),
                                  " bytes left)"));
    }
    r_.ReadString(len, out);
    return absl::OkStatus();
  }

  absl::Status ReadType(std::string_view what, GgufType* out) {
    uint32_t t = 0;
    if (!r_.Read(&t)) return EndOfFile(what);
    if (t > kMaxGgufType) {
      return Invalid(absl::StrCat(std::string(what), " ", t, " is not a valid GGUF value type"));
    }
    *out = static_cast<GgufType>(t);
    return absl::OkStatus();
  }

  absl::Status ParseKeyValue(GgufFile& f, uint64_t index) {
    std::string_view key;
    if (absl::Status s = ReadString(absl::StrCat("metadata key ", index), &key); !s.ok()) return s;
    const std::string ctx = absl::StrCat("metadata key ", Printable(key));
    GgufType type = GgufType::kUint8;
    if (absl::Status s = ReadType(ctx + " type", &type); !s.ok()) return s;
    GgufValue value;
    if (absl::Status s = ParseValue(ctx, type, 0, value); !s.ok()) return s;
    if (!f.metadata_index_.emplace(key, f.metadata.size()).second) {
      return Invalid(absl::StrCat("duplicate metadata key ", Printable(key)));
    }
    f.metadata.emplace_back(key, std::move(value));
    return absl::OkStatus();
  }

  absl::Status ParseValue(const std::string& ctx, GgufType type, int depth, GgufValue& v) {
    v.type_ = type;
    if (type == GgufType::kString) return ReadString(ctx + " string", &v.str_);
    if (type != GgufType::kArray) {
      if (!r_.ReadBytes(ScalarSize(type), &v.raw_)) return EndOfFile(ctx + " value");
      return absl::OkStatus();
    }
    if (depth >= kGgufMaxArrayDepth) {
      return Invalid(absl::StrCat(ctx, ": arrays nested deeper than ", kGgufMaxArrayDepth));
    }
    if (absl::Status s = ReadType(ctx + " array element type", &v.elem_type_); !s.ok()) return s;
    if (!r_.Read(&v.count_)) return EndOfFile(ctx + " array length");
    const size_t min_size = MinEncodedSize(v.elem_type_);
    if (v.count_ > r_.remaining() / min_size) {
      return Invalid(absl::StrCat(ctx, ": array length ", v.count_, " of ",
                                  std::string(GgufTypeName(v.elem_type_)),
                                  " extends past end of file"));
    }
    if (v.elem_type_ == GgufType::kString) {
      v.strings_.resize(v.count_);
      for (uint64_t i = 0; i < v.count_; ++i) {
        if (absl::Status s = ReadString(ctx, &v.strings_[i], i); !s.ok()) return s;
      }
    } else if (v.elem_type_ == GgufType::kArray) {
      // Grown as elements parse, not sized to count_ up front: a GgufValue is ~8x larger
      // than the 12 bytes that bound count_, and with nesting the up-front sizes would
      // multiply (up to 64x the file) before the data proves to be there.
      for (uint64_t i = 0; i < v.count_; ++i) {
        GgufValue e;
        if (absl::Status s =
                ParseValue(absl::StrCat(ctx, "[", i, "]"), GgufType::kArray, depth + 1, e);
            !s.ok()) {
          return s;
        }
        v.arrays_.push_back(std::move(e));
      }
    } else {
      r_.ReadBytes(v.count_ * min_size, &v.raw_);  // fits: checked above
    }
    return absl::OkStatus();
  }

  absl::Status ReadAlignment(GgufFile& f) {
    const GgufValue* a = f.FindMetadata("general.alignment");
    if (a == nullptr) return absl::OkStatus();
    const std::optional<int64_t> v = a->AsInt();
    if (!v.has_value()) {
      return Invalid(absl::StrCat("metadata key general.alignment has type ", a->Describe(),
                                  ", expected an integer"));
    }
    if (*v <= 0 || !IsPowerOfTwo(static_cast<uint64_t>(*v)) || *v > (int64_t{1} << 30)) {
      return Invalid(
          absl::StrCat("general.alignment ", *v, " is not a power of two between 1 and 2^30"));
    }
    f.alignment = static_cast<uint64_t>(*v);
    return absl::OkStatus();
  }

  absl::Status ParseTensorInfo(GgufFile& f, uint64_t index) {
    GgufTensorInfo t;
    if (absl::Status s = ReadString(absl::StrCat("tensor ", index, " name"), &t.name); !s.ok()) {
      return s;
    }
    const std::string name = Printable(t.name);
    uint32_t n_dims = 0;
    if (!r_.Read(&n_dims)) return EndOfFile(absl::StrCat("tensor ", name, " dimension count"));
    if (n_dims < 1 || n_dims > kGgufMaxDims) {
      return Invalid(absl::StrCat("tensor ", name, " has ", n_dims, " dimensions (1 to ",
                                  kGgufMaxDims, " supported)"));
    }
    t.n_dims = static_cast<int>(n_dims);
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      if (!r_.Read(&ne)) return EndOfFile(absl::StrCat("tensor ", name, " dimensions"));
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(elements, ne, &elements) ||
          elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Invalid(absl::StrCat("tensor ", name, " has invalid dimension ", d, " = ", ne));
      }
      t.ne[d] = static_cast<int64_t>(ne);
    }
    if (!r_.Read(&t.ggml_type)) return EndOfFile(absl::StrCat("tensor ", name, " type"));
    const std::optional<DType> dtype = DTypeFromGgml(t.ggml_type);
    if (!dtype.has_value()) {
      return Invalid(
          absl::StrCat("tensor ", name, " has unsupported type id ", t.ggml_type, " (",
                       std::string(GgmlTypeName(t.ggml_type)),
                       "); supported: f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_K, q5_K, q6_K"));
    }
    t.dtype = *dtype;
    const int block = DTypeBlockElems(t.dtype);
    if (t.ne[0] % block != 0) {
      return Invalid(absl::StrCat("tensor ", name, ": ", std::string(GgmlTypeName(t.ggml_type)),
                                  " row length ", t.ne[0], " is not a multiple of ", block));
    }
    // elements < 2^63 and a whole number of blocks; bytes = blocks * block bytes must not
    // overflow.
    const uint64_t blocks = elements / static_cast<uint64_t>(block);
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(DTypeBlockBytes(t.dtype)),
                               &t.size_bytes)) {
      return Invalid(absl::StrCat("tensor ", name, " is too large"));
    }
    if (!r_.Read(&t.offset)) return EndOfFile(absl::StrCat("tensor ", name, " data offset"));
    if (!f.tensor_index_.emplace(t.name, f.tensors.size()).second) {
      return Invalid(absl::StrCat("duplicate tensor name ", name));
    }
    f.tensors.push_back(t);
    return absl::OkStatus();
  }

  // Computes the data section start and points every tensor into it.
  absl::StatusOr<GgufFile> PlaceTensors(GgufFile f) {
    const uint64_t header_end = r_.offset();
    const uint64_t pad = (f.alignment - header_end % f.alignment) % f.alignment;
    f.data_offset = header_end + pad;  // header_end <= size, pad < 2^30: no overflow
    if (f.tensors.empty()) return f;
    if (f.data_offset > bytes_.size()) {
      return Invalid(absl::StrCat("tensor data section at offset ", f.data_offset,
                                  " starts past end of file (file size ", bytes_.size(), ")"));
    }
    const uint64_t data_size = bytes_.size() - f.data_offset;
    for (GgufTensorInfo& t : f.tensors) {
      const std::string name = Printable(t.name);
      if (t.offset % f.alignment != 0) {
        return Invalid(absl::StrCat("tensor ", name, " offset ", t.offset,
                                    " is not a multiple of the alignment ", f.alignment));
      }
      if (t.offset > data_size || t.size_bytes > data_size - t.offset) {
        return Invalid(absl::StrCat("tensor ", name, " (offset ", t.offset, ", ", t.size_bytes,
                                    " bytes) extends past end of file (data section has ",
                                    data_size, " bytes)"));
      }
      t.data = bytes_.data() + f.data_offset + t.offset;
      const size_t natural = t.dtype == DType::kF32 ? 4 : 2;
      if (reinterpret_cast<uintptr_t>(t.data) % natural != 0) {
        return Invalid(
            absl::StrCat("tensor ", name, " data is not aligned to ", natural, " bytes in memory"));
      }
    }
    return f;
  }

  std::span<const uint8_t> bytes_;
  ByteReader r_;
};

absl::StatusOr<GgufFile> ParseGguf(std::span<const uint8_t> bytes) {
  return GgufParser(bytes).Parse();
}

absl::StatusOr<MappedGguf> OpenGguf(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  std::shared_ptr<const MappedFile> shared = std::move(*file);
  absl::StatusOr<GgufFile> gguf = ParseGguf(shared->bytes());
  if (!gguf.ok()) {
    return absl::Status(gguf.status().code(), absl::StrCat(path, ": ", gguf.status().message()));
  }
  return MappedGguf{std::move(shared), *std::move(gguf)};
}

}  // namespace kvserve::model
