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
  return std::unique_ptr<MemoryBlockStore>(new MemoryBlockStore(options));
}

MemoryBlockStore::MemoryBlockStore(const Options& options)
    : index_(BlockIndex::Options{.capacity_bytes = options.capacity_bytes,
                                 .partition_quota_bytes = options.partition_quota_bytes}) {}

absl::StatusOr<LookupResult> MemoryBlockStore::Lookup(const BlockHash& partition,
                                                      std::span<const BlockHash> chain,
                                                      absl::Time now) {
  LookupResult result;
  std::lock_guard<std::mutex> lock(mu_);
  result.present_blocks =
      index_.LongestPrefix(partition, chain, now, /*touch=*/true, &result.present_bytes);
  return result;
}

absl::StatusOr<RecordPtr> MemoryBlockStore::Get(const BlockHash& partition, const BlockHash& key,
                                                absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(Key{partition, key});
  if (it == records_.end()) return RecordPtr();
  int64_t bytes = 0;
  index_.LongestPrefix(partition, std::span<const BlockHash>(&key, 1), now, /*touch=*/true, &bytes);
  return it->second;
}

absl::StatusOr<PutOutcome> MemoryBlockStore::Put(const BlockHash& partition, const BlockHash& key,
                                                 const BlockHash& parent, RecordPtr record,
                                                 absl::Time now) {
  std::vector<RecordPtr> released;  // freed after the lock is dropped
  std::lock_guard<std::mutex> lock(mu_);
  if (records_.contains(Key{partition, key})) return PutOutcome::kAlreadyPresent;
  // A chain's first block has the partition (identity digest) as its parent.
  std::optional<BlockHash> index_parent;
  if (parent != partition) index_parent = parent;
  BlockIndex::InsertResult inserted =
      index_.Insert(partition, key, index_parent, static_cast<int64_t>(record->size()), now);
  for (const BlockIndex::Evicted& e : inserted.evicted) {
    auto it = records_.find(Key{e.partition, e.key});
    if (it == records_.end()) continue;
    released.push_back(std::move(it->second));
    records_.erase(it);
  }
  if (!inserted.inserted) return PutOutcome::kNoRoom;
  records_.emplace(Key{partition, key}, std::move(record));
  return PutOutcome::kStored;
}

void MemoryBlockStore::Erase(const BlockHash& partition, const BlockHash& key) {
  std::vector<RecordPtr> released;
  std::lock_guard<std::mutex> lock(mu_);
  for (const BlockIndex::Evicted& e : index_.Erase(partition, key)) {
    auto it = records_.find(Key{e.partition, e.key});
    if (it == records_.end()) continue;
    released.push_back(std::move(it->second));
    records_.erase(it);
  }
}

void MemoryBlockStore::SetSession(const std::string& id, const BlockHash& partition,
                                  const BlockHash& head, absl::Time expires_at) {
  std::lock_guard<std::mutex> lock(mu_);
  index_.SetSession(id, partition, head, expires_at);
}

void MemoryBlockStore::RemoveSession(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  index_.RemoveSession(id);
}

BlockStoreStats MemoryBlockStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  const BlockIndex::Stats s = index_.stats();
  BlockStoreStats out;
  out.blocks = s.blocks;
  out.bytes = s.bytes;
  out.capacity_bytes = s.capacity_bytes;
  out.evictions = s.evictions;
  return out;
}

}  // namespace kvserve::cachesvc
