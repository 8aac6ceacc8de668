// What the memory and disk tiers share: a BlockStore whose choice of the blocks held
// (capacity, partition quota, eviction) is a BlockIndex's. Lookup is answered from the
// index alone (no record is read) and the session hints go to the index; a subclass keeps
// the records themselves and implements Get, Put, Erase and stats, consulting the index
// under mu_.
#ifndef KVSERVE_CACHESVC_INDEXED_BLOCK_STORE_H_
#define KVSERVE_CACHESVC_INDEXED_BLOCK_STORE_H_

#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cachesvc/block_index.h"
#include "cachesvc/block_store.h"

namespace kvserve::cachesvc {

// Threading: every method is thread-safe. mu_ guards the index; a subclass may guard its
// own state with it too (one lock for the index and what must agree with it).
class IndexedBlockStore : public BlockStore {
 public:
  // The index's longest present prefix; counts as a use of those blocks. Never fails.
  absl::StatusOr<LookupResult> Lookup(const BlockHash& partition, std::span<const BlockHash> chain,
                                      absl::Time now) final;
  void SetSession(const std::string& id, const BlockHash& partition, const BlockHash& head,
                  absl::Time expires_at) final;
  void RemoveSession(const std::string& id) final;
  bool takes_session_hints() const final { return true; }

 protected:
  // Precondition: `index` is non-null.
  explicit IndexedBlockStore(std::unique_ptr<BlockIndex> index) : index_(std::move(index)) {}

  mutable std::mutex mu_;
  const std::unique_ptr<BlockIndex> index_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_INDEXED_BLOCK_STORE_H_
