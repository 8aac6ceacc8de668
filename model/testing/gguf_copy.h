// Copies a parsed GGUF file into a GgufWriter (every metadata value with its type, every
// tensor's bytes), so a test can write a variant of a real model file: copy, Set* what
// differs, write. Arrays of arrays are not supported (no model key uses them).
// Test-only.
#ifndef KVSERVE_MODEL_TESTING_GGUF_COPY_H_
#define KVSERVE_MODEL_TESTING_GGUF_COPY_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"

namespace kvserve::model {

namespace gguf_copy_internal {

// The elements of an integer or float array as T.
template <typename T>
std::vector<T> Elements(const GgufValue& v, bool is_float) {
  std::vector<T> out;
  out.reserve(v.size());
  for (uint64_t i = 0; i < v.size(); ++i) {
    out.push_back(is_float ? static_cast<T>(*v.FloatAt(i)) : static_cast<T>(*v.IntAt(i)));
  }
  return out;
}

inline absl::Status CopyArray(std::string_view key, const GgufValue& v, GgufWriter* out) {
  switch (v.elem_type()) {
    case GgufType::kString: {
      std::vector<std::string> s;
      for (uint64_t i = 0; i < v.size(); ++i) s.emplace_back(*v.StringAt(i));
      out->SetStringArray(key, s);
      return absl::OkStatus();
    }
    case GgufType::kUint8:
      out->SetUint8Array(key, Elements<uint8_t>(v, false));
      return absl::OkStatus();
    case GgufType::kInt8:
      out->SetInt8Array(key, Elements<int8_t>(v, false));
      return absl::OkStatus();
    case GgufType::kUint16:
      out->SetUint16Array(key, Elements<uint16_t>(v, false));
      return absl::OkStatus();
    case GgufType::kInt16:
      out->SetInt16Array(key, Elements<int16_t>(v, false));
      return absl::OkStatus();
    case GgufType::kUint32:
      out->SetUint32Array(key, Elements<uint32_t>(v, false));
      return absl::OkStatus();
    case GgufType::kInt32:
      out->SetInt32Array(key, Elements<int32_t>(v, false));
      return absl::OkStatus();
    case GgufType::kUint64:
      out->SetUint64Array(key, Elements<uint64_t>(v, false));
      return absl::OkStatus();
    case GgufType::kInt64:
      out->SetInt64Array(key, Elements<int64_t>(v, false));
      return absl::OkStatus();
    case GgufType::kFloat32:
      out->SetFloat32Array(key, Elements<float>(v, true));
      return absl::OkStatus();
    case GgufType::kFloat64:
      out->SetFloat64Array(key, Elements<double>(v, true));
      return absl::OkStatus();
    case GgufType::kBool:
    case GgufType::kArray:
      break;
  }
  return absl::UnimplementedError(
      absl::StrCat("cannot copy ", std::string(key), " (", v.Describe(), ")"));
}

inline absl::Status CopyValue(std::string_view key, const GgufValue& v, GgufWriter* out) {
  switch (v.type()) {
    case GgufType::kUint8:
      out->SetUint8(key, static_cast<uint8_t>(*v.AsInt()));
      break;
    case GgufType::kInt8:
      out->SetInt8(key, static_cast<int8_t>(*v.AsInt()));
      break;
    case GgufType::kUint16:
      out->SetUint16(key, static_cast<uint16_t>(*v.AsInt()));
      break;
    case GgufType::kInt16:
      out->SetInt16(key, static_cast<int16_t>(*v.AsInt()));
      break;
    case GgufType::kUint32:
      out->SetUint32(key, static_cast<uint32_t>(*v.AsInt()));
      break;
    case GgufType::kInt32:
      out->SetInt32(key, static_cast<int32_t>(*v.AsInt()));
      break;
    case GgufType::kUint64:
      out->SetUint64(key, static_cast<uint64_t>(*v.AsInt()));
      break;
    case GgufType::kInt64:
      out->SetInt64(key, *v.AsInt());
      break;
    case GgufType::kFloat32:
      out->SetFloat32(key, static_cast<float>(*v.AsFloat()));
      break;
    case GgufType::kFloat64:
      out->SetFloat64(key, *v.AsFloat());
      break;
    case GgufType::kBool:
      out->SetBool(key, *v.AsBool());
      break;
    case GgufType::kString:
      out->SetString(key, *v.AsString());
      break;
    case GgufType::kArray:
      return CopyArray(key, v, out);
  }
  return absl::OkStatus();
}

}  // namespace gguf_copy_internal

// Sets every metadata key of `in` on `out` and adds every tensor (bytes copied). `in`'s
// bytes must stay alive until `out` is written. UNIMPLEMENTED for an array of arrays.
inline absl::Status CopyGguf(const GgufFile& in, GgufWriter* out) {
  for (const auto& [key, value] : in.metadata) {
    if (key == "general.alignment") continue;  // the writer writes its own
    if (absl::Status s = gguf_copy_internal::CopyValue(key, value, out); !s.ok()) return s;
  }
  for (const GgufTensorInfo& t : in.tensors) {
    std::vector<uint64_t> dims;
    for (int d = 0; d < t.n_dims; ++d) dims.push_back(static_cast<uint64_t>(t.ne[d]));
    if (absl::Status s = out->AddTensorBytes(t.name, t.dtype, std::move(dims),
                                             std::span<const uint8_t>(t.data, t.size_bytes));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_TESTING_GGUF_COPY_H_
