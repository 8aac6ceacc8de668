#include "server/memory_trimmer.h"

#include <malloc.h>

namespace kvserve::server {

MemoryTrimmer::MemoryTrimmer(absl::Duration interval)
    : interval_(interval), thread_([this] { Run(); }) {}

MemoryTrimmer::~MemoryTrimmer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MemoryTrimmer::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, absl::ToChronoNanoseconds(interval_),
                       [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_; })) {
    lock.unlock();
    malloc_trim(0);
    lock.lock();
  }
}

}  // namespace kvserve::server
