#include "client/hash_ring.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace kvserve::client {

uint64_t HashRing::Hash(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

HashRing::HashRing(std::vector<std::string> replicas, int virtual_nodes)
    : replicas_(std::move(replicas)) {
  virtual_nodes = std::max(1, virtual_nodes);
  points_.reserve(replicas_.size() * static_cast<size_t>(virtual_nodes));
  for (int r = 0; r < static_cast<int>(replicas_.size()); ++r) {
    for (int i = 0; i < virtual_nodes; ++i) {
      points_.emplace_back(Hash(absl::StrCat(replicas_[r], "#", i)), r);
    }
  }
  // Ties (astronomically unlikely) break by name, so that the order of `replicas` never
  // matters.
  std::sort(points_.begin(), points_.end(), [this](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return replicas_[a.second] < replicas_[b.second];
  });
}

std::vector<int> HashRing::Preference(std::string_view key) const {
  std::vector<int> order;
  if (points_.empty()) return order;
  const uint64_t h = Hash(key);
  auto start =
      std::lower_bound(points_.begin(), points_.end(), h,
                       [](const auto& point, uint64_t value) { return point.first < value; });
  std::vector<bool> seen(replicas_.size(), false);
  const size_t start_index = static_cast<size_t>(start - points_.begin());
  for (size_t i = 0; i < points_.size() && order.size() < replicas_.size(); ++i) {
    const int r = points_[(start_index + i) % points_.size()].second;
    if (!seen[r]) {
      seen[r] = true;
      order.push_back(r);
    }
  }
  return order;
}

}  // namespace kvserve::client
