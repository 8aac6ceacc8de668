#include "common/huge_page_memory.h"

#include <sys/mman.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::common {

absl::StatusOr<HugePageMemory> HugePageMemory::Allocate(size_t bytes, bool populate) {
  if (bytes == 0) return absl::InvalidArgumentError("HugePageMemory: 0 bytes");
  if (bytes > (size_t{1} << 48)) {
    return absl::InvalidArgumentError(
        absl::StrCat("HugePageMemory: ", bytes, " bytes is too much"));
  }
  const size_t size = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  // One extra huge page of slack to align the start; anonymous memory is zero-filled.
  const size_t mapping_bytes = size + kHugePageBytes;
  void* mapping =
      mmap(nullptr, mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map ", mapping_bytes, " bytes"));
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(mapping);
  const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  HugePageMemory m;
  m.mapping_ = mapping;
  m.mapping_bytes_ = mapping_bytes;
  m.data_ = reinterpret_cast<uint8_t*>(aligned);
  m.size_ = size;
#ifdef MADV_HUGEPAGE
  // Advice only: without THP support the region stays on small pages.
  (void)madvise(m.data_, size, MADV_HUGEPAGE);
#endif
  if (populate) {
    // One write per 4 KiB page faults every page in (a huge page at once where THP
    // applies); the values stay zero.
    constexpr size_t kPage = 4096;
    volatile uint8_t* p = m.data_;
    for (size_t off = 0; off < size; off += kPage) p[off] = 0;
  }
  return m;
}

HugePageMemory::HugePageMemory(HugePageMemory&& other) noexcept { *this = std::move(other); }

HugePageMemory& HugePageMemory::operator=(HugePageMemory&& other) noexcept {
  if (this != &other) {
    if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

HugePageMemory::~HugePageMemory() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

}  // namespace kvserve::common
