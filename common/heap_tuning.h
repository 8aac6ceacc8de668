// The C library's allocator tuned for a process that moves large buffers (KV block
// records of 0.5–1.2 MB through gRPC: socket reads, protobuf messages, records).
//
// glibc serves a large allocation with its own mmap and gives it back at free, and
// returns the top of the heap to the kernel once it exceeds a trim threshold; every such
// buffer then costs a page fault per 4 KiB when it is written again. On a virtual
// machine a fault costs microseconds, so a session-cache fetch spent most of its time in
// faults (docs/performance.md, "Session cache"). Keeping large buffers in the heap and
// freed memory mapped makes them reusable without faults, at the price of a resident
// heap as large as the largest burst of live buffers (the KV pool is its own mapping
// and not affected).
//
// Threading: call once from main(), before starting threads. Process-wide (mallopt):
// libraries never call it.
#ifndef KVSERVE_COMMON_HEAP_TUNING_H_
#define KVSERVE_COMMON_HEAP_TUNING_H_

#include <cstddef>

namespace kvserve::common {

struct HeapTuningOptions {
  // Allocations below this come from the heap (reused after free) instead of a mapping
  // of their own. Default 32 MiB (glibc's own ceiling for its adaptive threshold, which
  // a fixed value turns off).
  size_t mmap_threshold_bytes = size_t{32} << 20;
  // Free memory at the top of the heap kept mapped before it is given back. Default
  // 256 MiB.
  size_t trim_threshold_bytes = size_t{256} << 20;
};

// Applies `options` where the C library supports it (glibc); false when it did not
// (another C library, or a value it refused), and the process runs with its defaults.
bool TuneHeapForLargeBuffers(const HeapTuningOptions& options = {});

}  // namespace kvserve::common

#endif  // KVSERVE_COMMON_HEAP_TUNING_H_
