#include "service/serial_executor.h"

#include <utility>

namespace kvserve::service {

SerialExecutor::SerialExecutor(const common::Clock* clock)
    : clock_(clock), thread_([this] { Loop(); }) {}

SerialExecutor::~SerialExecutor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void SerialExecutor::Post(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void SerialExecutor::PostAt(absl::Time when, Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    timed_.emplace(when, std::move(task));
  }
  cv_.notify_one();
}

void SerialExecutor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // Move the timed tasks that are due (all of them when stopping) behind the others.
    const absl::Time now = clock_->Now();
    while (!timed_.empty() && (stopping_ || timed_.begin()->first <= now)) {
      ready_.push_back(std::move(timed_.begin()->second));
      timed_.erase(timed_.begin());
    }
    if (ready_.empty()) {
      if (stopping_) return;  // every task has run
      clock_->WaitUntil(cv_, lock, timed_.empty() ? absl::InfiniteFuture() : timed_.begin()->first);
      continue;
    }
    Task task = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    std::move(task)();
    lock.lock();
  }
}

}  // namespace kvserve::service
