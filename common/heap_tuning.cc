#include "common/heap_tuning.h"

#include <climits>
#include <cstdlib>
#include <string_view>

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
  if (options.arena_max < 0) return false;
  // mallopt returns 1 on success.
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(options.mmap_threshold_bytes)) != 1 ||
      mallopt(M_TRIM_THRESHOLD, static_cast<int>(options.trim_threshold_bytes)) != 1) {
    return false;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const bool user_arenas =
      tunables != nullptr && std::string_view(tunables).find("arena_max") != std::string_view::npos;
  if (options.arena_max == 0 || user_arenas) return true;
  return mallopt(M_ARENA_MAX, options.arena_max) == 1;
#else
  (void)options;
  return false;
#endif
}

}  // namespace kvserve::common
