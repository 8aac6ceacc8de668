#include "common/heap_tuning.h"

#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kvserve::common {

bool TuneHeapForLargeBuffers(const HeapTuningOptions& options) {
#if defined(__GLIBC__)
  if (options.mmap_threshold_bytes > static_cast<size_t>(INT_MAX) ||
      options.trim_threshold_bytes > static_cast<size_t>(INT_MAX)) {
    return false;
  }
  // mallopt returns 1 on success.
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(options.mmap_threshold_bytes)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(options.trim_threshold_bytes)) == 1;
#else
  (void)options;
  return false;
#endif
}

}  // namespace kvserve::common
