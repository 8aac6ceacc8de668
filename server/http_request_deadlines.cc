#include "server/http_request_deadlines.h"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>

#include "absl/time/clock.h"

namespace kvserve::server {

HttpRequestDeadlines::HttpRequestDeadlines(absl::Duration limit)
    : limit_(limit), sweeper_([this] { Sweep(); }) {}

HttpRequestDeadlines::~HttpRequestDeadlines() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  sweeper_.join();
}

void HttpRequestDeadlines::Opened(MHD_Connection* connection, int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_[connection] = Progress{.fd = fd, .since = absl::Now()};
}

void HttpRequestDeadlines::HeadersArrived(MHD_Connection* connection) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(connection);
  if (it == connections_.end()) return;
  it->second.since = absl::Now();  // the body is due within the limit from now
}

void HttpRequestDeadlines::BodyArrived(MHD_Connection* connection) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(connection);
  if (it != connections_.end()) it->second.answering = true;
}

void HttpRequestDeadlines::RequestEnded(MHD_Connection* connection) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(connection);
  if (it == connections_.end()) return;
  it->second.answering = false;
  it->second.since = absl::Now();
}

void HttpRequestDeadlines::Closed(MHD_Connection* connection) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_.erase(connection);
}

int64_t HttpRequestDeadlines::shut() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shut_;
}

void HttpRequestDeadlines::Sweep() {
  const absl::Duration period = std::min(limit_ / 4, absl::Seconds(1));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, absl::ToChronoNanoseconds(period),
                            [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; })) {
    const absl::Time now = absl::Now();
    for (auto& [connection, p] : connections_) {
      if (p.answering || p.shut || now - p.since <= limit_) continue;
      // Under mu_: Closed (called before the socket is closed) cannot run meanwhile, so
      // `fd` is still this connection's.
      shutdown(p.fd, SHUT_RDWR);
      p.shut = true;
      ++shut_;
    }
  }
}

}  // namespace kvserve::server
