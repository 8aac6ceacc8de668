#include "cachesvc/memory_block_store.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvserve::cachesvc {

absl::StatusOr<std::unique_ptr<MemoryBlockStore>> MemoryBlockStore::Create(const Options& options) {
  if (options.capacity_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory-bytes must be >= 1, got ", options.capacity_bytes));
  }
  if (options.partition_quota_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition-quota-bytes must be >= 0, got ", options.partition_quota_bytes));
  }
  absl::StatusOr<std::unique_ptr<BlockIndex>> index = BlockIndex::Create(
      {.capacity_bytes = static_cast<uint64_t>(options.capacity_bytes),
       .partition_quota_bytes = static_cast<uint64_t>(options.partition_quota_bytes),
       .policy = options.policy});
  if (!index.ok()) return index.status();
  return std::unique_ptr<MemoryBlockStore>(new MemoryBlockStore(*std::move(index)));
}

void MemoryBlockStore::DropRecords(std::span<const Evicted> evicted,
                                   std::vector<RecordPtr>* released) {
  for (const Evicted& e : evicted) {
    auto it = records_.find(BlockKey{e.partition, e.key});
    if (it == records_.end()) continue;
    released->push_back(std::move(it->second));
    records_.erase(it);
  }
}

absl::StatusOr<RecordPtr> MemoryBlockStore::Get(const BlockKey& block, absl::Time now) {
  const auto& [partition, key] = block;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(BlockKey{partition, key});
  if (it == records_.end()) return RecordPtr();
  index_->LongestPrefix(partition, std::span<const BlockHash>(&key, 1), now, /*touch=*/true);
  return it->second;
}

absl::StatusOr<PutOutcome> MemoryBlockStore::Put(const BlockKey& block, const BlockHash& parent,
                                                 RecordPtr record, absl::Time now) {
  const auto& [partition, key] = block;
  std::vector<RecordPtr> released;  // freed after the lock is dropped
  std::lock_guard<std::mutex> lock(mu_);
  if (records_.contains(BlockKey{partition, key})) return PutOutcome::kAlreadyPresent;
  // A chain's first block has the partition (identity digest) as its parent.
  std::optional<BlockHash> index_parent;
  if (parent != partition) index_parent = parent;
  absl::StatusOr<InsertResult> inserted =
      index_->Insert(partition, key, index_parent, static_cast<uint64_t>(record->size()), now);
  // RESOURCE_EXHAUSTED: larger than the capacity or the quota; FAILED_PRECONDITION: the
  // parent is not held (no lookup could reach the block). Either way: not stored.
  if (!inserted.ok()) return PutOutcome::kNoRoom;
  DropRecords(inserted->evicted, &released);
  switch (inserted->outcome) {
    case InsertOutcome::kNoRoom:
      return PutOutcome::kNoRoom;
    case InsertOutcome::kTouched:
      return PutOutcome::kAlreadyPresent;
    case InsertOutcome::kInserted:
      break;
  }
  records_.emplace(BlockKey{partition, key}, std::move(record));
  return PutOutcome::kStored;
}

void MemoryBlockStore::Erase(const BlockKey& block) {
  const auto& [partition, key] = block;
  std::vector<RecordPtr> released;
  std::lock_guard<std::mutex> lock(mu_);
  // Only this block: its descendants stay (unreachable until it is stored again) and are
  // evicted as usual.
  if (!index_->Erase(partition, key)) return;
  auto it = records_.find(BlockKey{partition, key});
  if (it == records_.end()) return;
  released.push_back(std::move(it->second));
  records_.erase(it);
}

BlockStoreStats MemoryBlockStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  const BlockIndexStats s = index_->stats();
  BlockStoreStats out;
  out.blocks = s.blocks;
  out.bytes = static_cast<int64_t>(s.bytes);
  out.capacity_bytes = static_cast<int64_t>(index_->options().capacity_bytes);
  for (int r = 0; r < kNumEvictReasons; ++r) {
    out.evictions.emplace_back(std::string(EvictReasonName(static_cast<EvictReason>(r))),
                               s.evictions_total[r]);
  }
  return out;
}

}  // namespace kvserve::cachesvc
