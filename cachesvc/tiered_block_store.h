// Memory in front of disk: a BlockStore made of two others, a small fast one (memory)
// that may forget blocks early and a large one (disk) that keeps them longer.
//
// Put writes both, memory first, then disk synchronously (the caller waits for the disk
// write: a StoreBlocks answer means the block survives a restart, unless the disk tier
// refused it). Lookup reports the longest prefix present in the union of the tiers (a
// block counts when either tier holds it). Get reads memory, then disk, and copies what
// it read from disk into memory (promotion).
#ifndef KVSERVE_CACHESVC_TIERED_BLOCK_STORE_H_
#define KVSERVE_CACHESVC_TIERED_BLOCK_STORE_H_

#include <memory>
#include <string>

#include "cachesvc/block_store.h"
#include "cachesvc/storage_common.h"

namespace kvserve::cachesvc {

// Threading: every method is thread-safe (both tiers are; this class adds only
// thread-safe counters).
class TieredBlockStore final : public BlockStore {
 public:
  // Preconditions: both non-null.
  TieredBlockStore(std::unique_ptr<BlockStore> memory, std::unique_ptr<BlockStore> disk);

  // Asks both tiers for the chain; where the longer answer ends, asks both again for the
  // rest (a block one tier lost may still be in the other), until neither has the next
  // block. Present bytes add up the answering tier's bytes of each run.
  absl::StatusOr<LookupResult> Lookup(const BlockHash& partition, std::span<const BlockHash> chain,
                                      absl::Time now) override;
  // Memory, then disk; a record read from disk is put into memory (outcome ignored:
  // promotion is best effort).
  absl::StatusOr<RecordPtr> Get(const BlockKey& key, absl::Time now) override;
  // kStored when either tier stored it, kAlreadyPresent when neither stored it and one
  // had it, else kNoRoom. A disk error after memory took the record is counted
  // ("disk_put_error") and the memory outcome returned; with both failing, the disk's
  // error.
  absl::StatusOr<PutOutcome> Put(const BlockKey& key, const BlockHash& parent, RecordPtr record,
                                 absl::Time now) override;
  void Erase(const BlockKey& key) override;
  void SetSession(const std::string& id, const BlockHash& partition, const BlockHash& head,
                  absl::Time expires_at) override;
  void RemoveSession(const std::string& id) override;
  bool takes_session_hints() const override { return true; }
  // blocks, bytes and capacity_bytes are the disk tier's (the tier bounding what the
  // cache holds; memory normally holds a subset); evictions are both tiers' reasons
  // prefixed "memory_" and "disk_", plus this class' own counts.
  BlockStoreStats stats() const override;
  std::string name() const override { return "memory+disk"; }

 private:
  const std::unique_ptr<BlockStore> memory_;
  const std::unique_ptr<BlockStore> disk_;
  DropCounters counters_;
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_TIERED_BLOCK_STORE_H_
