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
// Threads: glibc gives threads arenas of their own, up to 8 per core; a buffer freed in
// one arena is reused only by threads of that arena. A session-cache fetch receives on
// gRPC's threads and on threads of its own, so with many arenas each fetch landed in
// cold ones: 4,000-7,000 page faults per 38 MB fetch, run after run, where with 2 arenas
// they fall to about 140 after the first few fetches (docs/performance.md, "Session
// cache"). Small allocations are served from per-thread caches without the arena lock,
// so few arenas cost little contention.
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
  // Malloc arenas at most (M_ARENA_MAX); 0 = glibc's default (8 per core). A setting of
  // glibc.malloc.arena_max in GLIBC_TUNABLES takes precedence. Default 2.
  int arena_max = 2;
};

// Applies `options` where the C library supports it (glibc); false when it did not
// (another C library, a negative arena_max, or a value it refused), and the process runs
// with its defaults.
bool TuneHeapForLargeBuffers(const HeapTuningOptions& options = {});

}  // namespace kvserve::common

#endif  // KVSERVE_COMMON_HEAP_TUNING_H_
