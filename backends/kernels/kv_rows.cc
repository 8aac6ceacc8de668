#include "backends/kernels/kv_rows.h"

#include <cstddef>
#include <cstring>

#include "model/dtype.h"

namespace kvserve::backends::kernels {
namespace {

// Element i of a stored row as float (memcpy: block pointers need no alignment).
inline float LoadElement(const uint8_t* row, model::DType dtype, size_t i) {
  if (dtype == model::DType::kF16) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    return model::HalfToFloat(h);
  }
  float f;
  std::memcpy(&f, row + 4 * i, 4);
  return f;
}

}  // namespace

uint8_t* SequenceKv::Row(int layer, KvKind kind, int64_t pos) const {
  const int64_t block = pos / layout_->block_tokens;
  const int row = static_cast<int>(pos % layout_->block_tokens);
  return blocks_[static_cast<size_t>(block)] + layout_->offset(layer, static_cast<int>(kind), row);
}

void SequenceKv::Write(int layer, KvKind kind, int64_t pos, std::span<const float> row) const {
  uint8_t* dst = Row(layer, kind, pos);
  if (layout_->dtype == model::DType::kF16) {
    for (size_t i = 0; i < row.size(); ++i) {
      const uint16_t h = model::FloatToHalf(row[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  } else {
    std::memcpy(dst, row.data(), row.size() * sizeof(float));
  }
}

void SequenceKv::Read(int layer, KvKind kind, int64_t pos, std::span<float> out) const {
  const uint8_t* src = Row(layer, kind, pos);
  for (size_t i = 0; i < out.size(); ++i) out[i] = LoadElement(src, layout_->dtype, i);
}

float SequenceKv::DotSlice(int layer, KvKind kind, int64_t pos, int offset,
                           std::span<const float> x) const {
  const uint8_t* src = Row(layer, kind, pos);
  float sum = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    sum += x[i] * LoadElement(src, layout_->dtype, static_cast<size_t>(offset) + i);
  }
  return sum;
}

void SequenceKv::AxpySlice(int layer, KvKind kind, int64_t pos, int offset, float w,
                           std::span<float> acc) const {
  const uint8_t* src = Row(layer, kind, pos);
  for (size_t i = 0; i < acc.size(); ++i) {
    acc[i] += w * LoadElement(src, layout_->dtype, static_cast<size_t>(offset) + i);
  }
}

}  // namespace kvserve::backends::kernels
