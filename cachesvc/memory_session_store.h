// Session records in memory, ordered by id (for paging), each living until its
// expires_at. Expired records are invisible at once and dropped lazily: on every Put and
// Update (before the record limit is checked) and as reads meet them. Tombstones are
// records (they count toward max_records) that List and size() leave out.
//
// Update runs its mutation under the store's mutex: updates of all ids are serialized
// (a mutation is a few comparisons; the record is moved, not copied, in and out).
//
// Invariants: by_expiry_ holds exactly one (expires_at, id) pair per record of
// sessions_; tombstones_ counts the records of sessions_ that are closed.
//
// Threading: thread-safe (one mutex).
#ifndef KVSERVE_CACHESVC_MEMORY_SESSION_STORE_H_
#define KVSERVE_CACHESVC_MEMORY_SESSION_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "cachesvc/block_store.h"

namespace kvserve::cachesvc {

class MemorySessionStore final : public SessionRecordStore {
 public:
  struct Options {
    // Live records held at most; a Put of a new id beyond it is RESOURCE_EXHAUSTED.
    // Default 100,000.
    int64_t max_records = 100'000;
  };
  explicit MemorySessionStore(const Options& options) : options_(options) {}

  absl::StatusOr<SessionUpdate> Update(const std::string& id, const SessionMutation& mutate,
                                       absl::Time now) override;
  absl::Status Put(StoredSession session, absl::Time now) override;
  absl::StatusOr<StoredSession> Get(const std::string& id, absl::Time now) override;
  absl::Status Delete(const std::string& id, absl::Time now) override;
  absl::StatusOr<Page> List(const BlockHash* partition, int32_t page_size,
                            const std::string& page_token, absl::Time now) override;
  int64_t size() const override;

 private:
  void DropExpired(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(std::map<std::string, StoredSession>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `session` (its id not in sessions_); RESOURCE_EXHAUSTED at the record limit.
  absl::Status InsertLocked(StoredSession session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable std::mutex mu_;
  std::map<std::string, StoredSession> sessions_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<absl::Time, std::string>> by_expiry_ ABSL_GUARDED_BY(mu_);
  int64_t tombstones_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_MEMORY_SESSION_STORE_H_
