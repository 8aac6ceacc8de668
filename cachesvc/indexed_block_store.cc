#include "cachesvc/indexed_block_store.h"

#include <cstdint>

namespace kvserve::cachesvc {

absl::StatusOr<LookupResult> IndexedBlockStore::Lookup(const BlockHash& partition,
                                                       std::span<const BlockHash> chain,
                                                       absl::Time now) {
  LookupResult result;
  uint64_t bytes = 0;
  std::lock_guard<std::mutex> lock(mu_);
  result.present_blocks = index_->LongestPrefix(partition, chain, now, /*touch=*/true, &bytes);
  result.present_bytes = static_cast<int64_t>(bytes);
  return result;
}

void IndexedBlockStore::SetSession(const std::string& id, const BlockHash& partition,
                                   const BlockHash& head, absl::Time expires_at) {
  std::lock_guard<std::mutex> lock(mu_);
  // No clock here: the index never moves its clock back, so InfinitePast means "no newer
  // time than seen".
  index_->SetSession(id, partition, head, expires_at, absl::InfinitePast());
}

void IndexedBlockStore::RemoveSession(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  index_->RemoveSession(id);
}

}  // namespace kvserve::cachesvc
