// kvserve-cache's session index: the session records (a SessionRecordStore) and the
// eviction hints they give the block store (BlockStore::SetSession/RemoveSession) as one
// component, so that the two never disagree. Every record change goes through Update,
// which changes the hint of that id in the same operation; Create restores the hints of
// every live record found in the store (after a restart on the same --disk-dir, or in a
// Redis shared with other processes).
//
// Hint of a record: a live record (not a tombstone, not expired) with a head block sets
// (id, partition, head, expires_at); anything else (no head, a tombstone, deleted)
// removes the id's hint.
//
// Invariants: for every id, the hint last given to the block store is the hint of the
// record last written by this index (updates of one id are serialized by a stripe lock
// around the store's update and the hint, so two racing updates cannot leave the older
// record's hint). Records changed by other processes sharing the store (Redis) are not
// seen; the Redis block store ignores hints.
//
// Threading: every method is thread-safe. Borrows the stores, which must outlive it.
#ifndef KVSERVE_CACHESVC_SESSION_INDEX_H_
#define KVSERVE_CACHESVC_SESSION_INDEX_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cachesvc/block_store.h"

namespace kvserve::cachesvc {

class SessionIndex {
 public:
  // Pages through every live record of `records` (at `now`) and gives `blocks` its hint
  // (nothing when blocks->takes_session_hints() is false). Errors: the store's List
  // error (UNAVAILABLE).
  static absl::StatusOr<std::unique_ptr<SessionIndex>> Create(SessionRecordStore* records,
                                                              BlockStore* blocks, absl::Time now);

  // SessionRecordStore::Update, then the hint of the record it left (when it wrote).
  absl::StatusOr<SessionUpdate> Update(const std::string& id, const SessionMutation& mutate,
                                       absl::Time now);
  // Reads (no hint changes), as the store's.
  absl::StatusOr<StoredSession> Get(const std::string& id, absl::Time now) {
    return records_->Get(id, now);
  }
  absl::StatusOr<SessionRecordStore::Page> List(const BlockHash* partition, int32_t page_size,
                                                const std::string& page_token, absl::Time now) {
    return records_->List(partition, page_size, page_token, now);
  }
  int64_t size() const { return records_->size(); }

  // Hints restored by Create.
  int64_t restored_hints() const { return restored_hints_; }

 private:
  static constexpr size_t kStripes = 64;
  SessionIndex(SessionRecordStore* records, BlockStore* blocks)
      : records_(records), blocks_(blocks) {}
  void SetHint(const std::string& id, const std::optional<StoredSession>& record, absl::Time now);

  SessionRecordStore* const records_;
  BlockStore* const blocks_;
  // Serializes Update of one id (by hash) with its hint.
  std::array<std::mutex, kStripes> stripes_;
  int64_t restored_hints_ = 0;
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_SESSION_INDEX_H_
