// PLACEHOLDER until the "policy" branch's BlockIndex is merged (it replaces this file):
// block metadata and eviction for the memory tier, with the API that BlockIndex
// documents. Eviction here is least-recently-used among leaves (blocks no other block
// names as parent), so a chain never loses a block before its descendants.
//
// Threading: not thread-safe; the owner serializes calls.
#ifndef KVSERVE_CACHESVC_BLOCK_INDEX_H_
#define KVSERVE_CACHESVC_BLOCK_INDEX_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "cache/block_hash.h"

namespace kvserve::cachesvc {

class BlockIndex {
 public:
  struct Options {
    int64_t capacity_bytes = int64_t{1} << 30;  // all partitions together
    int64_t partition_quota_bytes = 0;          // per partition; 0 = no quota
  };
  struct Evicted {
    cache::BlockHash partition;
    cache::BlockHash key;
    std::string reason;  // "capacity" or "quota"
  };
  struct InsertResult {
    bool inserted = false;  // false: no room (larger than capacity or quota) or present
    std::vector<Evicted> evicted;
  };
  struct Stats {
    int64_t blocks = 0;
    int64_t bytes = 0;
    int64_t capacity_bytes = 0;
    std::vector<std::pair<std::string, int64_t>> evictions;
  };

  explicit BlockIndex(Options options) : options_(options) {}

  // The longest run chain[0..k) present; its bytes into *bytes. `touch` marks them used.
  int32_t LongestPrefix(const cache::BlockHash& partition, std::span<const cache::BlockHash> chain,
                        absl::Time now, bool touch, int64_t* bytes);
  bool Contains(const cache::BlockHash& partition, const cache::BlockHash& key) const;
  // Inserts `key` (child of `parent`, none for a chain's first block), evicting leaves
  // until it fits.
  InsertResult Insert(const cache::BlockHash& partition, const cache::BlockHash& key,
                      std::optional<cache::BlockHash> parent, int64_t bytes, absl::Time now);
  // Removes `key` and every block below it; returns what was removed.
  std::vector<Evicted> Erase(const cache::BlockHash& partition, const cache::BlockHash& key);
  void SetSession(const std::string& id, const cache::BlockHash& partition,
                  const cache::BlockHash& head, absl::Time expires_at) {}
  void RemoveSession(const std::string& id) {}
  Stats stats() const;

 private:
  struct Key {
    cache::BlockHash partition;
    cache::BlockHash key;
    friend bool operator==(const Key&, const Key&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.partition, k.key);
    }
  };
  struct Entry {
    std::optional<cache::BlockHash> parent;
    int64_t bytes = 0;
    absl::Time last_use;
    int32_t children = 0;
  };
  // Evicts the least recently used leaf of `partition` (any partition when null).
  bool EvictOne(const cache::BlockHash* partition, const char* reason,
                std::vector<Evicted>* evicted);
  void Remove(const Key& key);

  Options options_;
  absl::flat_hash_map<Key, Entry> entries_;
  absl::flat_hash_map<cache::BlockHash, int64_t> partition_bytes_;
  int64_t bytes_ = 0;
  int64_t evicted_capacity_ = 0;
  int64_t evicted_quota_ = 0;
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_BLOCK_INDEX_H_
