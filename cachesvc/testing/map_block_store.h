// A minimal in-memory BlockStore for tests of stores layered over others (no capacity,
// no eviction but Erase). Test-only.
#ifndef KVSERVE_CACHESVC_TESTING_MAP_BLOCK_STORE_H_
#define KVSERVE_CACHESVC_TESTING_MAP_BLOCK_STORE_H_

#include <mutex>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "cachesvc/block_store.h"

namespace kvserve::cachesvc::testing {

// Threading: every method is thread-safe (one mutex).
class MapBlockStore final : public BlockStore {
 public:
  absl::StatusOr<LookupResult> Lookup(const BlockHash& partition, std::span<const BlockHash> chain,
                                      absl::Time /*now*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    LookupResult result;
    for (const BlockHash& key : chain) {
      const auto it = records_.find(BlockKey{partition, key});
      if (it == records_.end()) break;
      ++result.present_blocks;
      result.present_bytes += static_cast<int64_t>(it->second->size());
    }
    return result;
  }
  absl::StatusOr<RecordPtr> Get(const BlockKey& key, absl::Time /*now*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = records_.find(key);
    return it == records_.end() ? RecordPtr() : it->second;
  }
  absl::StatusOr<PutOutcome> Put(const BlockKey& key, const BlockHash& /*parent*/, RecordPtr record,
                                 absl::Time /*now*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    return records_.try_emplace(key, std::move(record)).second ? PutOutcome::kStored
                                                               : PutOutcome::kAlreadyPresent;
  }
  void Erase(const BlockKey& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    records_.erase(key);
  }
  BlockStoreStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    BlockStoreStats stats;
    stats.blocks = static_cast<int64_t>(records_.size());
    for (const auto& [key, record] : records_) stats.bytes += static_cast<int64_t>(record->size());
    return stats;
  }
  std::string name() const override { return "map"; }

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<BlockKey, RecordPtr> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::cachesvc::testing

#endif  // KVSERVE_CACHESVC_TESTING_MAP_BLOCK_STORE_H_
