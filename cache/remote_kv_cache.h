// The engine's view of a session cache service (kvserve-cache): the few calls it makes
// to reuse KV computed by other replicas or earlier processes, and to share its own.
// The gRPC implementation is cache::RemoteCacheClient (cache/remote_cache_client.h);
// tests use in-process fakes. It knows block hashes, block records and session records,
// nothing of the engine.
//
// Nothing returned is trusted: the engine checks every block record
// (cache/block_record.h) before a byte of it reaches the KV pool, and treats every
// block error as a miss.
//
// Session records are the one truth of a conversation across replicas
// (kvserve.v1.SessionCache in proto/kvserve/v1/session_cache.proto):
//   - every record has a version (1 when created, +1 per write); PutSession is a
//     compare-and-set on it: it names the version it replaces (0: none may exist);
//   - a turn takes the session's lease (GetSession with a LeaseRequest): one holder at a
//     time, until its deadline; the turn's commit (PutSession naming the holder)
//     releases it, so does ReleaseLease; an expired lease is free for anyone;
//   - DeleteSession leaves a tombstone (`closed`), so every replica learns that the
//     session was closed rather than lost.
#ifndef KVSERVE_CACHE_REMOTE_KV_CACHE_H_
#define KVSERVE_CACHE_REMOTE_KV_CACHE_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache/block_hash.h"

namespace kvserve::cache {

// A session record (kvserve.v1.SessionRecord).
struct RemoteSession {
  std::string id;
  // The model's identity digest without a salt (RootBlockHash(identity, "")): only a
  // replica serving the same model and KV layout continues the session.
  BlockHash partition;
  std::vector<int32_t> tokens;     // the whole history
  std::vector<int32_t> turn_ends;  // token offsets where turns ended
  bool has_head = false;
  BlockHash head;      // hash of the last full block of `tokens`
  std::string owner;   // the replica that wrote it; informational
  std::string tenant;  // the tenant the session belongs to (empty: no authentication)
  absl::Duration ttl = absl::ZeroDuration();  // zero: the service's default
  // Set by the service on reads (ignored on writes):
  int64_t version = 0;       // the record's version (>= 1)
  bool closed = false;       // a tombstone: the session was closed (tokens and turn_ends empty)
  std::string lease_holder;  // the holder of a live lease; empty when none
  absl::Duration lease_remaining = absl::ZeroDuration();  // of that lease
};

// A turn's claim on a session (GetSession): `holder` names the turn uniquely (replica
// and request), `duration` how long the lease lasts unless renewed (a GetSession with
// the same holder) or released.
struct LeaseRequest {
  std::string holder;
  absl::Duration duration = absl::Seconds(30);
};

// Threading: every method is thread-safe and may block until `deadline`; the engine
// calls them from its remote-cache worker threads, never from the step thread.
class RemoteKvCache {
 public:
  virtual ~RemoteKvCache() = default;

  struct Presence {
    int32_t blocks = 0;  // leading blocks of the chain present
    int64_t bytes = 0;   // their records' bytes
  };
  // One round trip: how much of `chain` (in `partition`) the service holds.
  virtual absl::StatusOr<Presence> Lookup(const BlockHash& partition,
                                          std::span<const BlockHash> chain,
                                          absl::Time deadline) = 0;
  // Streams the records of `chain`: `on_record(index, record)` once for each complete
  // record as it arrives, `record` valid during the call only (the callee copies what it
  // keeps, e.g. the payload into its KV block). An implementation may fetch consecutive
  // ranges of the chain in parallel: on_record may then run concurrently on several
  // threads, for different indices, each range's records in chain order; so it must be
  // thread-safe. Fetching stops at the first missing block or the first record on_record
  // refuses (returns false); records of later ranges may have reached on_record before
  // that was known, but do not count. Returns k: the records of chain[0, k) all arrived
  // and on_record accepted them; or the error of a transfer that failed before the first
  // missing block or refusal (records on_record accepted before it were still handed
  // over: a caller that tracks its accepted indices may keep its own accepted prefix).
  using RecordSink = std::function<bool(int32_t index, std::string_view record)>;
  virtual absl::StatusOr<int32_t> Fetch(const BlockHash& partition,
                                        std::span<const BlockHash> chain, absl::Time deadline,
                                        const RecordSink& on_record) = 0;
  // Stores encoded records (cache::EncodeBlockRecord) of `partition`. Returns how many
  // the service accepted.
  virtual absl::StatusOr<int32_t> Store(const BlockHash& partition,
                                        std::span<const std::string> records,
                                        absl::Time deadline) = 0;

  // Writes `session` as version `expected_version` + 1 when the stored record's version
  // is `expected_version` (0: no record, live or tombstone, may exist) and no lease but
  // `lease_holder`'s is live; releases `lease_holder`'s lease (empty: none). Returns the
  // new version. ABORTED when the version differs or another holder's lease is live;
  // FAILED_PRECONDITION when the session is closed (a tombstone); INVALID_ARGUMENT,
  // RESOURCE_EXHAUSTED for a record out of limits; UNAVAILABLE, DEADLINE_EXCEEDED.
  virtual absl::StatusOr<int64_t> PutSession(const RemoteSession& session, int64_t expected_version,
                                             const std::string& lease_holder,
                                             absl::Time deadline) = 0;
  // The record of `id`; a tombstone comes back with `closed` set (and no lease taken).
  // With `lease`, also takes the session's lease for lease->holder (or renews it, when
  // that holder has it): ABORTED when another holder's lease is live (the record is not
  // returned). NOT_FOUND when the service has no record (never written, expired or
  // evicted).
  virtual absl::StatusOr<RemoteSession> GetSession(const std::string& id, const LeaseRequest* lease,
                                                   absl::Time deadline) = 0;
  // Gives up `holder`'s lease on `id` without writing (a turn that did not complete).
  // OK when `holder` holds none (expired, taken over, unknown session).
  virtual absl::Status ReleaseLease(const std::string& id, const std::string& holder,
                                    absl::Time deadline) = 0;
  // Closes `id`: the record becomes a tombstone (kept for the service's tombstone
  // lifetime, which must be at least any replica's session lifetime), whether or not a
  // live record existed. OK then; UNAVAILABLE, DEADLINE_EXCEEDED.
  virtual absl::Status DeleteSession(const std::string& id, absl::Time deadline) = 0;
};

}  // namespace kvserve::cache

#endif  // KVSERVE_CACHE_REMOTE_KV_CACHE_H_
