// A zero-filled anonymous memory region for large, long-lived buffers that are read at
// memory speed (the KV cache), backed by transparent huge pages where the kernel allows.
//
// Why: decode attention reads every cached K/V row each step, scattered over the whole
// pool. With 4 KiB pages nearly every row costs a TLB miss and a page walk; 2 MiB pages
// cover the pool with a few hundred TLB entries (s110m bf16, 1900-token contexts,
// kvserve-bench backend alternated: batch 1 40.6 / 50.8 / 53.9 -> 50.6 / 54.0 / 55.6 tok/s,
// batch 8 83.9 / 106.6 / 116.1 -> 91.4 / 126.4 / 118.1). On kernels with THP "madvise" mode
// (Debian's default) the region must ask for them, which is what this does; with THP off it is
// ordinary memory.
#ifndef KVSERVE_COMMON_HUGE_PAGE_MEMORY_H_
#define KVSERVE_COMMON_HUGE_PAGE_MEMORY_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace kvserve::common {

class HugePageMemory {
 public:
  // Maps at least `bytes` (> 0) bytes, 2 MiB aligned, zero-filled, and advises huge
  // pages. With `populate`, every page is made resident now (written once), so the
  // process's resident size includes the whole region from the start instead of growing
  // as it is first touched. INVALID_ARGUMENT for 0 bytes, RESOURCE_EXHAUSTED when the
  // mapping fails.
  static absl::StatusOr<HugePageMemory> Allocate(size_t bytes, bool populate = false);

  HugePageMemory() = default;
  HugePageMemory(HugePageMemory&& other) noexcept;
  HugePageMemory& operator=(HugePageMemory&& other) noexcept;
  HugePageMemory(const HugePageMemory&) = delete;
  HugePageMemory& operator=(const HugePageMemory&) = delete;
  ~HugePageMemory();  // unmaps

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  // the mapped size: `bytes` rounded up to 2 MiB

  static constexpr size_t kHugePageBytes = size_t{2} << 20;

 private:
  void* mapping_ = nullptr;  // what mmap returned
  size_t mapping_bytes_ = 0;
  uint8_t* data_ = nullptr;  // 2 MiB aligned, inside the mapping
  size_t size_ = 0;
};

}  // namespace kvserve::common

#endif  // KVSERVE_COMMON_HUGE_PAGE_MEMORY_H_
