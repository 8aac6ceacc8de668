#include "cache/record_assembler.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve::cache {

absl::Status RecordAssembler::Check(int32_t index, int64_t offset, int64_t record_bytes,
                                    int64_t size) const {
  if (record_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunks.record_bytes must be >= 1, got ", record_bytes));
  }
  if (record_bytes > max_record_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("chunks.record_bytes ", record_bytes,
                                                     " exceeds the limit of ", max_record_bytes_,
                                                     " (max-record-bytes)"));
  }
  if (index != next_index_) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunks.index must be ", next_index_, ", got ", index));
  }
  if (offset != received_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("chunks.offset of record ", index, " must be ",
                                                   received_bytes_, ", got ", offset));
  }
  if (mid_record() && record_bytes != record_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("chunks.record_bytes of record ", index,
                                                   " changed from ", record_bytes_, " to ",
                                                   record_bytes));
  }
  if (size == 0 || size > record_bytes - offset) {
    return absl::InvalidArgumentError(absl::StrCat("chunks.data of record ", index, " at offset ",
                                                   offset, " has ", size, " bytes; must be in [1, ",
                                                   record_bytes - offset, "]"));
  }
  return absl::OkStatus();
}

bool RecordAssembler::Append(int64_t record_bytes, std::string_view data) {
  if (!mid_record()) {
    record_bytes_ = record_bytes;
    buffer_.clear();
    buffer_.reserve(static_cast<size_t>(record_bytes));
  }
  buffer_.append(data);
  received_bytes_ += static_cast<int64_t>(data.size());
  if (received_bytes_ < record_bytes_) return false;
  received_bytes_ = 0;
  record_bytes_ = 0;
  ++next_index_;
  return true;
}

absl::Status RecordAssembler::Add(int32_t index, int64_t offset, int64_t record_bytes,
                                  std::string* data, std::optional<std::string>* completed) {
  completed->reset();
  const int64_t size = static_cast<int64_t>(data->size());
  if (absl::Status s = Check(index, offset, record_bytes, size); !s.ok()) return s;
  if (size == record_bytes) {  // a whole record in one chunk: no copy
    *completed = std::move(*data);
    ++next_index_;
    return absl::OkStatus();
  }
  // Exact reservations (Append's): no slack kept in a store; the buffer moves out whole.
  if (Append(record_bytes, *data)) {
    *completed = std::move(buffer_);
    buffer_ = std::string();
  }
  return absl::OkStatus();
}

absl::Status RecordAssembler::AddView(int32_t index, int64_t offset, int64_t record_bytes,
                                      std::string_view data,
                                      std::optional<std::string_view>* completed) {
  completed->reset();
  const int64_t size = static_cast<int64_t>(data.size());
  if (absl::Status s = Check(index, offset, record_bytes, size); !s.ok()) return s;
  if (size == record_bytes) {  // a whole record in one chunk: no copy
    *completed = data;
    ++next_index_;
    return absl::OkStatus();
  }
  if (Append(record_bytes, data)) *completed = std::string_view(buffer_);
  return absl::OkStatus();
}

}  // namespace kvserve::cache
