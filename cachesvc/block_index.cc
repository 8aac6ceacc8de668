#include "cachesvc/block_index.h"

namespace kvserve::cachesvc {

int32_t BlockIndex::LongestPrefix(const cache::BlockHash& partition,
                                  std::span<const cache::BlockHash> chain, absl::Time now,
                                  bool touch, int64_t* bytes) {
  int32_t n = 0;
  *bytes = 0;
  for (const cache::BlockHash& key : chain) {
    auto it = entries_.find(Key{partition, key});
    if (it == entries_.end()) break;
    if (touch) it->second.last_use = now;
    *bytes += it->second.bytes;
    ++n;
  }
  return n;
}

bool BlockIndex::Contains(const cache::BlockHash& partition, const cache::BlockHash& key) const {
  return entries_.contains(Key{partition, key});
}

BlockIndex::InsertResult BlockIndex::Insert(const cache::BlockHash& partition,
                                            const cache::BlockHash& key,
                                            std::optional<cache::BlockHash> parent, int64_t bytes,
                                            absl::Time now) {
  InsertResult result;
  if (Contains(partition, key) || bytes > options_.capacity_bytes ||
      (options_.partition_quota_bytes > 0 && bytes > options_.partition_quota_bytes)) {
    return result;
  }
  if (options_.partition_quota_bytes > 0) {
    while (partition_bytes_[partition] + bytes > options_.partition_quota_bytes) {
      if (!EvictOne(&partition, "quota", &result.evicted)) return result;
    }
  }
  while (bytes_ + bytes > options_.capacity_bytes) {
    if (!EvictOne(nullptr, "capacity", &result.evicted)) return result;
  }
  // The parent may have been evicted just now: then the block is an orphan that no
  // lookup can reach; keep it anyway (a later store of the parent reconnects it).
  if (parent.has_value()) {
    auto it = entries_.find(Key{partition, *parent});
    if (it != entries_.end()) ++it->second.children;
  }
  entries_[Key{partition, key}] = Entry{parent, bytes, now, 0};
  bytes_ += bytes;
  partition_bytes_[partition] += bytes;
  result.inserted = true;
  return result;
}

bool BlockIndex::EvictOne(const cache::BlockHash* partition, const char* reason,
                          std::vector<Evicted>* evicted) {
  const Key* victim = nullptr;
  absl::Time oldest = absl::InfiniteFuture();
  for (const auto& [key, entry] : entries_) {
    if (entry.children > 0) continue;
    if (partition != nullptr && key.partition != *partition) continue;
    if (victim == nullptr || entry.last_use < oldest) {
      victim = &key;
      oldest = entry.last_use;
    }
  }
  if (victim == nullptr) return false;
  const Key key = *victim;
  evicted->push_back(Evicted{key.partition, key.key, reason});
  (std::string(reason) == "quota" ? evicted_quota_ : evicted_capacity_) += 1;
  Remove(key);
  return true;
}

void BlockIndex::Remove(const Key& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  if (it->second.parent.has_value()) {
    auto parent = entries_.find(Key{key.partition, *it->second.parent});
    if (parent != entries_.end()) --parent->second.children;
  }
  bytes_ -= it->second.bytes;
  partition_bytes_[key.partition] -= it->second.bytes;
  entries_.erase(it);
}

std::vector<BlockIndex::Evicted> BlockIndex::Erase(const cache::BlockHash& partition,
                                                   const cache::BlockHash& key) {
  std::vector<Evicted> removed;
  if (!Contains(partition, key)) return removed;
  // Descendants first (a chain below a dropped block is unreachable).
  std::vector<Key> doomed = {Key{partition, key}};
  for (size_t i = 0; i < doomed.size(); ++i) {
    for (const auto& [k, entry] : entries_) {
      if (k.partition == partition && entry.parent == doomed[i].key) doomed.push_back(k);
    }
  }
  for (auto it = doomed.rbegin(); it != doomed.rend(); ++it) {
    removed.push_back(Evicted{it->partition, it->key, "erased"});
    Remove(*it);
  }
  return removed;
}

BlockIndex::Stats BlockIndex::stats() const {
  Stats s;
  s.blocks = static_cast<int64_t>(entries_.size());
  s.bytes = bytes_;
  s.capacity_bytes = options_.capacity_bytes;
  s.evictions = {{"capacity", evicted_capacity_}, {"quota", evicted_quota_}};
  return s;
}

}  // namespace kvserve::cachesvc
