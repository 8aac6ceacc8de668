#include "engine/stop_matcher.h"

#include <algorithm>
#include <cstddef>
#include <utility>

namespace kvserve::engine {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings) {
  for (std::string& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Result StopMatcher::Feed(std::string_view delta) {
  Result result;
  if (stopped_) {
    result.stopped = true;
    return result;
  }
  held_.append(delta);
  if (stops_.empty()) {
    result.text = std::move(held_);
    held_.clear();
    return result;
  }

  // Earliest occurrence of any stop string. `held_` had no whole match before this
  // delta, so searching all of it is correct (and it is short).
  size_t match = std::string::npos;
  for (const std::string& stop : stops_) {
    match = std::min(match, held_.find(stop));
  }
  if (match != std::string::npos) {
    result.text = held_.substr(0, match);
    result.stopped = true;
    stopped_ = true;
    held_.clear();
    return result;
  }

  // Hold back the longest tail that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, held_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  result.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return result;
}

std::string StopMatcher::Flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace kvserve::engine
