#include "cachesvc/tiered_block_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/block_record.h"

namespace kvserve::cachesvc {

TieredBlockStore::TieredBlockStore(std::unique_ptr<BlockStore> memory,
                                   std::unique_ptr<BlockStore> disk)
    : memory_(std::move(memory)), disk_(std::move(disk)), counters_({"disk_put_error"}) {}

absl::StatusOr<LookupResult> TieredBlockStore::Lookup(const BlockHash& partition,
                                                      std::span<const BlockHash> chain,
                                                      absl::Time now) {
  // Invariant: chain[0..result.present_blocks) are each in at least one tier.
  LookupResult result;
  while (static_cast<size_t>(result.present_blocks) < chain.size()) {
    const std::span<const BlockHash> rest = chain.subspan(result.present_blocks);
    absl::StatusOr<LookupResult> in_memory = memory_->Lookup(partition, rest, now);
    if (!in_memory.ok()) return in_memory.status();
    absl::StatusOr<LookupResult> on_disk = disk_->Lookup(partition, rest, now);
    if (!on_disk.ok()) return on_disk.status();
    const LookupResult& longer =
        in_memory->present_blocks >= on_disk->present_blocks ? *in_memory : *on_disk;
    if (longer.present_blocks == 0) break;  // neither tier has chain[present_blocks]
    result.present_blocks += longer.present_blocks;
    result.present_bytes += longer.present_bytes;
  }
  return result;
}

absl::StatusOr<RecordPtr> TieredBlockStore::Get(const BlockKey& block, absl::Time now) {
  absl::StatusOr<RecordPtr> record = memory_->Get(block, now);
  if (!record.ok() || *record != nullptr) return record;
  record = disk_->Get(block, now);
  if (!record.ok() || *record == nullptr) return record;
  // The disk tier re-checked the record whole: its header is sound.
  cache::BlockRecordHeader header;
  if (cache::ParseBlockRecordHeader(AsBytes(**record), &header) == cache::RecordCheck::kOk) {
    (void)memory_->Put(block, header.parent, *record, now);
  }
  return record;
}

absl::StatusOr<PutOutcome> TieredBlockStore::Put(const BlockKey& block, const BlockHash& parent,
                                                 RecordPtr record, absl::Time now) {
  absl::StatusOr<PutOutcome> in_memory = memory_->Put(block, parent, record, now);
  absl::StatusOr<PutOutcome> on_disk = disk_->Put(block, parent, std::move(record), now);
  if (!on_disk.ok()) {
    if (!in_memory.ok()) return on_disk.status();
    counters_.Add("disk_put_error");
    return *in_memory;
  }
  if (!in_memory.ok()) return *on_disk;
  if (*in_memory == PutOutcome::kStored || *on_disk == PutOutcome::kStored) {
    return PutOutcome::kStored;
  }
  if (*in_memory == PutOutcome::kAlreadyPresent || *on_disk == PutOutcome::kAlreadyPresent) {
    return PutOutcome::kAlreadyPresent;
  }
  return PutOutcome::kNoRoom;
}

void TieredBlockStore::Erase(const BlockKey& block) {
  memory_->Erase(block);
  disk_->Erase(block);
}

void TieredBlockStore::SetSession(const std::string& id, const BlockHash& partition,
                                  const BlockHash& head, absl::Time expires_at) {
  memory_->SetSession(id, partition, head, expires_at);
  disk_->SetSession(id, partition, head, expires_at);
}

void TieredBlockStore::RemoveSession(const std::string& id) {
  memory_->RemoveSession(id);
  disk_->RemoveSession(id);
}

BlockStoreStats TieredBlockStore::stats() const {
  const BlockStoreStats memory = memory_->stats();
  BlockStoreStats stats = disk_->stats();
  std::vector<std::pair<std::string, int64_t>> evictions;
  for (const auto& [reason, n] : memory.evictions) evictions.emplace_back("memory_" + reason, n);
  for (const auto& [reason, n] : stats.evictions) evictions.emplace_back("disk_" + reason, n);
  for (auto& entry : counters_.Snapshot()) evictions.push_back(std::move(entry));
  stats.evictions = std::move(evictions);
  return stats;
}

}  // namespace kvserve::cachesvc
