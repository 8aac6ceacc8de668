// Gives freed heap memory back to the operating system at a fixed interval
// (glibc's malloc_trim(0)).
//
// Why: glibc keeps freed memory in its per-thread arenas. A burst that allocates a lot
// for a moment (the HTTP/2 reset burst: Debian's gRPC 1.51 creates a call for every
// stream a client opens and resets, ~20 KB each, before any is processed; it predates
// gRPC's rapid-reset mitigations) otherwise leaves the process at its peak RSS for
// good, and bursts ratchet it up. Trimming is cheap here: the KV cache and the weights
// are mmap'ed, so the malloc heap is small.
//
// Threading: one background thread; the destructor stops and joins it.
#ifndef KVSERVE_SERVER_MEMORY_TRIMMER_H_
#define KVSERVE_SERVER_MEMORY_TRIMMER_H_

#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace kvserve::server {

class MemoryTrimmer {
 public:
  // Trims every `interval` (> 0) until destroyed.
  explicit MemoryTrimmer(absl::Duration interval);
  ~MemoryTrimmer();
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

 private:
  void Run();

  const absl::Duration interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_MEMORY_TRIMMER_H_
