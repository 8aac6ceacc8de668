// A read-only memory mapping of a whole file.
#ifndef KVSERVE_MODEL_MAPPED_FILE_H_
#define KVSERVE_MODEL_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace kvserve::model {

// Maps a file read-only (MAP_PRIVATE, PROT_READ) and unmaps it on destruction.
// The bytes are page-aligned and stay valid for the object's lifetime; the file
// descriptor is closed right after mapping. Immutable after Open: safe to share
// between threads.
class MappedFile {
 public:
  // NOT_FOUND when `path` does not exist, PERMISSION_DENIED when it cannot be
  // read, INVALID_ARGUMENT when it is not a regular file; messages name the path.
  // An empty file maps to an empty span.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;  // nullptr when size_ == 0
  size_t size_;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_MAPPED_FILE_H_
