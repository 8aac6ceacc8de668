// The memory tier of kvserve-cache: block records in a hash map keyed by (partition,
// block hash); which blocks stay is BlockIndex's decision (capacity, per-partition
// quota, conversation-aware eviction).
//
// Invariants:
//   - records_ and index_ hold the same keys.
//   - a block is stored only when its parent is (BlockIndex refuses orphans), and only
//     leaves are evicted, so every chain held is unbroken from its first block.
//   - a record in records_ passed every check before Put (the caller's contract) and is
//     never modified (records are shared, immutable strings).
//
// Memory: a record costs its bytes plus a map slot, a shared_ptr control block and an
// index entry (well under 1 KiB), i.e. < 0.1 % for ~1 MB blocks.
//
// Threading: thread-safe; one mutex (IndexedBlockStore's) guards the map and the index. Nothing
// large is copied or freed under it (records are shared_ptrs; evicted records are released after
// the lock is dropped).
#ifndef KVSERVE_CACHESVC_MEMORY_BLOCK_STORE_H_
#define KVSERVE_CACHESVC_MEMORY_BLOCK_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cachesvc/block_index.h"
#include "cachesvc/block_store.h"
#include "cachesvc/indexed_block_store.h"

namespace kvserve::cachesvc {

class MemoryBlockStore final : public IndexedBlockStore {
 public:
  struct Options {
    // Record bytes held at most (all partitions). Default 1 GiB.
    int64_t capacity_bytes = int64_t{1} << 30;
    // Record bytes one partition may hold; 0 = no quota (only the capacity). Default 0.
    int64_t partition_quota_bytes = 0;
    // Which blocks go first when room is needed (BlockIndex). Default conversation-aware.
    Policy policy = Policy::kConversation;
  };
  // INVALID_ARGUMENT when capacity_bytes < 1 or partition_quota_bytes < 0.
  static absl::StatusOr<std::unique_ptr<MemoryBlockStore>> Create(const Options& options);

  absl::StatusOr<RecordPtr> Get(const BlockKey& key, absl::Time now) override;
  absl::StatusOr<PutOutcome> Put(const BlockKey& key, const BlockHash& parent, RecordPtr record,
                                 absl::Time now) override;
  void Erase(const BlockKey& key) override;
  BlockStoreStats stats() const override;
  std::string name() const override { return "memory"; }

 private:
  explicit MemoryBlockStore(std::unique_ptr<BlockIndex> index)
      : IndexedBlockStore(std::move(index)) {}
  // Drops the records of `evicted` from records_ into `released` (freed by the caller
  // after the lock is dropped).
  void DropRecords(std::span<const Evicted> evicted, std::vector<RecordPtr>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::flat_hash_map<BlockKey, RecordPtr> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_MEMORY_BLOCK_STORE_H_
