// Where kvserve-cache keeps block records and session records: the interfaces its tiers
// (memory, disk, Redis) implement and the SessionCache service calls.
//
// Records reach a BlockStore already parsed and checked whole (cache/block_record.h):
// a store never makes a record visible that did not pass, and a Get that returns a
// record returns all of it (never a prefix of its bytes). Stores are keyed by
// (partition, block hash): a partition is the identity digest a chain starts from (one
// model, one cache salt), so different salts never share an entry in any tier, even if
// two hashes were ever equal.
#ifndef KVSERVE_CACHESVC_BLOCK_STORE_H_
#define KVSERVE_CACHESVC_BLOCK_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache/block_hash.h"

namespace kvserve::cachesvc {

using cache::BlockHash;

// What every store (and BlockIndex) keeps a block under: its hash within its partition.
struct BlockKey {
  BlockHash partition;
  BlockHash key;
  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const BlockKey& k) {
    return H::combine(std::move(h), k.partition, k.key);
  }
};

// An immutable record shared between a store and the calls reading it.
using RecordPtr = std::shared_ptr<const std::string>;

struct LookupResult {
  int32_t present_blocks = 0;  // leading blocks of the chain present, from the first
  int64_t present_bytes = 0;   // their records' bytes
};

enum class PutOutcome {
  kStored,          // now visible
  kAlreadyPresent,  // an equal key was there (kept; records of one key are equal)
  kNoRoom,          // over the partition's quota or larger than the whole capacity
};

struct BlockStoreStats {
  int64_t blocks = 0;
  int64_t bytes = 0;  // record bytes held
  int64_t capacity_bytes = 0;
  // Evictions by reason name (e.g. "expired_session", "capacity", "quota").
  std::vector<std::pair<std::string, int64_t>> evictions;
};

// Threading: every method is thread-safe.
class BlockStore {
 public:
  virtual ~BlockStore() = default;

  // The longest run chain[0..k) present in `partition` (one call for the whole chain);
  // counts as a use of those blocks for eviction. Errors: UNAVAILABLE (backend down).
  virtual absl::StatusOr<LookupResult> Lookup(const BlockHash& partition,
                                              std::span<const BlockHash> chain, absl::Time now) = 0;
  // The record of `key`, or nullptr when absent. Errors: UNAVAILABLE.
  virtual absl::StatusOr<RecordPtr> Get(const BlockKey& key, absl::Time now) = 0;
  // Stores a checked record of `key` whose chain parent is `parent` (key.partition for a
  // chain's first block). Errors: UNAVAILABLE.
  virtual absl::StatusOr<PutOutcome> Put(const BlockKey& key, const BlockHash& parent,
                                         RecordPtr record, absl::Time now) = 0;
  // Drops `key` (a reader found it corrupt). Unknown keys are ignored.
  virtual void Erase(const BlockKey& key) = 0;
  // Eviction hints: session `id` (of `partition`) continues from block `head` until
  // `expires_at`; RemoveSession ends that. Stores that evict on their own (Redis) may
  // ignore them.
  virtual void SetSession(const std::string& id, const BlockHash& partition, const BlockHash& head,
                          absl::Time expires_at) {}
  virtual void RemoveSession(const std::string& id) {}
  // True when the hints above are used (SessionIndex restores them at start only then).
  virtual bool takes_session_hints() const { return false; }
  virtual BlockStoreStats stats() const = 0;
  // "memory", "memory+disk", "redis".
  virtual std::string name() const = 0;
};

// A session record as stored (session_cache.proto SessionRecord, with the absolute
// expiry the server computed from its TTL, and its lease's absolute deadline).
struct StoredSession {
  std::string id;
  BlockHash partition;
  std::vector<int32_t> tokens;
  std::vector<int32_t> turn_ends;
  bool has_head = false;
  BlockHash head;
  std::string owner;
  std::string tenant;  // who the session belongs to; empty: no authentication
  absl::Time expires_at = absl::InfiniteFuture();
  int64_t version = 1;  // >= 1 (see session_cache.proto, "Sessions")
  bool closed = false;  // a tombstone: tokens and turn_ends empty, has_head false
  // The session's lease: held by `lease_holder` until `lease_expires_at` (wall clock);
  // none when the holder is empty. An expired lease is no lease.
  std::string lease_holder;
  absl::Time lease_expires_at = absl::InfinitePast();

  bool HasLiveLease(absl::Time now) const {
    return !lease_holder.empty() && lease_expires_at > now;
  }
};

// A record's next state, decided by SessionRecordStore::Update from its current one.
// `record` holds the current record (nullopt when there is none or it expired at the
// update's `now`; a tombstone is a record). Returns true to write `record` as the
// mutation changed it in place (nullopt: delete it), false to leave the store as it was,
// or an error to fail the update with it (nothing written); it changes `record` only
// when it returns true (stores rely on it to keep the record without a copy).
//
// A store may call it more than once in one Update (an optimistic store retries with the
// newer record after a conflicting write), so it must decide from its argument alone and
// have no other effect.
using SessionMutation = std::function<absl::StatusOr<bool>(std::optional<StoredSession>& record)>;

struct SessionUpdate {
  // The record after the update: as the mutation left it (written or not).
  std::optional<StoredSession> record;
  bool written = false;  // the store changed
};

// Threading: every method is thread-safe.
class SessionRecordStore {
 public:
  virtual ~SessionRecordStore() = default;
  // The one way the service changes a record: an atomic read-modify-write of record
  // `id`. No other change to `id` (by this store, or by another process sharing its
  // backend) lands between the read the mutation decided from and the write: a store
  // either holds the record's lock throughout or writes only if the record is still the
  // one it read. The store sets the written record's id to `id`. Returns the mutation's
  // error unchanged, or the store's: UNAVAILABLE, RESOURCE_EXHAUSTED (record limit: a new
  // id, tombstones count), ABORTED (an optimistic store lost the race more times than
  // it retries).
  virtual absl::StatusOr<SessionUpdate> Update(const std::string& id, const SessionMutation& mutate,
                                               absl::Time now) = 0;
  // Creates or replaces unconditionally (tools, tests; the service uses Update). Errors:
  // UNAVAILABLE, RESOURCE_EXHAUSTED (record limit).
  virtual absl::Status Put(StoredSession session, absl::Time now) = 0;
  // The record of `id`, a tombstone too. NOT_FOUND when unknown or expired at `now`.
  virtual absl::StatusOr<StoredSession> Get(const std::string& id, absl::Time now) = 0;
  // Forgets `id` (no tombstone). NOT_FOUND when unknown or expired.
  virtual absl::Status Delete(const std::string& id, absl::Time now) = 0;
  struct Page {
    // Without tokens, turn_ends and lease; never a tombstone.
    std::vector<StoredSession> sessions;
    std::string next_page_token;  // empty on the last page
  };
  // Live records of `partition` (all when null), ordered by id, after `page_token`;
  // tombstones are skipped.
  virtual absl::StatusOr<Page> List(const BlockHash* partition, int32_t page_size,
                                    const std::string& page_token, absl::Time now) = 0;
  // Records held, tombstones not counted.
  virtual int64_t size() const = 0;
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_BLOCK_STORE_H_
