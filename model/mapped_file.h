// The bytes of a whole file in memory, read-only: mapped, or read into huge pages.
#ifndef KVSERVE_MODEL_MAPPED_FILE_H_
#define KVSERVE_MODEL_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/huge_page_memory.h"

namespace kvserve::model {

// How MappedFile holds a file's bytes.
enum class FileResidency {
  // mmap (MAP_PRIVATE, PROT_READ): the page cache's own 4 KiB pages, shared with other
  // processes reading the file and dropped by the kernel under memory pressure.
  kMapped,
  // Read once into anonymous memory that asks for transparent huge pages
  // (common::HugePageMemory): private to the process and never dropped (resident like
  // any allocation), but read through 2 MiB pages: decode streams the weights faster
  // (measured: docs/performance.md, "Weights in huge pages"; likely because a weight
  // stream meets a TLB entry and a prefetcher stop every 4 KiB page otherwise).
  // Where the kernel gives no huge pages (THP "never"), ordinary anonymous memory.
  kHugePages,
};

// A file's bytes, read-only, released on destruction. The bytes are page-aligned (2 MiB
// aligned with kHugePages) and stay valid for the object's lifetime; the file descriptor
// is closed before Open returns. Immutable after Open: safe to share between threads.
class MappedFile {
 public:
  // NOT_FOUND when `path` does not exist, PERMISSION_DENIED when it cannot be read,
  // INVALID_ARGUMENT when it is not a regular file, RESOURCE_EXHAUSTED when the memory
  // cannot be had, DATA_LOSS when the file shrinks while it is read (kHugePages);
  // messages name the path. An empty file gives an empty span.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(
      const std::string& path, FileResidency residency = FileResidency::kMapped);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  FileResidency residency() const { return residency_; }

 private:
  MappedFile(std::string path, FileResidency residency, const uint8_t* data, size_t size,
             common::HugePageMemory memory)
      : path_(std::move(path)),
        residency_(residency),
        data_(data),
        size_(size),
        memory_(std::move(memory)) {}

  std::string path_;
  FileResidency residency_;
  const uint8_t* data_;  // nullptr when size_ == 0
  size_t size_;
  common::HugePageMemory memory_;  // kHugePages: holds data_; kMapped: empty (data_ is mmapped)
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_MAPPED_FILE_H_
