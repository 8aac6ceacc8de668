// The one owner of a session's life in the engine: open, turn start, turn end, fork,
// close, expiry, reclaim and the record sync with the session cache service.
//
// A session has three parts and this class is the only one that changes them together:
//   - the local copy (SessionStore: history, turn ends, TTL, busy, record version);
//   - the KV blocks kept between turns (cache::KvCacheManager's session pins, a
//     mechanism: this class decides when a session pins, forks and lets go);
//   - with a session cache service (cache::RemoteKvCache), the session record there,
//     which is the one truth of the conversation across replicas.
//
// With a session cache service, a turn runs like this (every remote call on this
// class's worker thread, never on the caller's):
//   1. BeginTurn takes the session's lease (GetSession with a lease held by this turn,
//      renewed while it runs) and reads the record at version v: the local copy becomes
//      the record (restored when unknown here); a tombstone closes the local copy
//      (NOT_FOUND); another holder's live lease is SessionBusy (ABORTED, with a retry
//      hint from the service); an unreachable service is UNAVAILABLE. No record at all
//      (never written, evicted, a memory-only service restarted) continues the local
//      copy, which is then created at its commit.
//   2. EndTurn of a completed turn commits the record at version v + 1
//      (compare-and-set, releasing the lease) and only then calls `done`: the engine
//      sends the turn's final response after it, so an acknowledged turn is never lost
//      and the next turn anywhere starts from it. A refused commit (the session changed
//      or was closed meanwhile, the service unreachable) fails the turn: the client was
//      not told it completed, and the next turn starts from the record again.
//   3. A turn that did not complete (cancel, deadline, error) gives the lease back.
// Open writes the new record (version 1); Fork reads the parent's record and writes
// the child's; Get reads the record (a tombstone closes the local copy); Close leaves
// a tombstone in the service, so a copy on any other replica is refused from then on.
// Without a session cache service every call is local and answers inline.
//
// Threading: Open/Fork/Close/Get/BeginTurn are thread-safe; their callbacks run once,
// inline without a session cache service, else on the worker thread; they must not
// block. EndTurn, Maintain and ReleaseAll run on the engine's step thread (they change
// KV pins); EndTurn's callback runs inline or on the worker thread.
#ifndef KVSERVE_ENGINE_SESSION_MANAGER_H_
#define KVSERVE_ENGINE_SESSION_MANAGER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache/block_hash.h"
#include "cache/kv_cache_manager.h"
#include "cache/remote_kv_cache.h"
#include "common/clock.h"
#include "engine/engine.h"
#include "engine/session_store.h"

namespace kvserve::engine {

class SessionManager {
 public:
  struct Options {
    SessionStore::Options store;
    // How long a turn's lease on a session lasts unless renewed (it is renewed every
    // third of it while the turn runs): a replica that dies mid-turn locks the session
    // for at most this long. Default 30 s.
    absl::Duration lease = absl::Seconds(30);
    // Deadline of each session cache call. Default 2 s.
    absl::Duration timeout = absl::Seconds(2);
    // This replica's name in records and lease holders.
    std::string replica;
    // The vocabulary size: records holding other token ids are refused (DATA_LOSS).
    int32_t vocab_size = 0;
  };

  using SessionCallback = std::function<void(absl::StatusOr<SessionInfo>)>;
  using StatusCallback = std::function<void(absl::Status)>;

  // `remote` (may be null: sessions live on this replica only) and `kv` must outlive
  // the manager; off the step thread only kv's thread-safe hashing is used.
  SessionManager(const Options& options, cache::RemoteKvCache* remote,
                 const cache::KvCacheManager* kv, const common::Clock* clock);
  // Stops the worker after it ran the work queued so far (every callback runs);
  // idempotent. Later calls run their remote work on the caller's thread.
  void Stop();
  ~SessionManager();  // Stop()
  SessionManager(const SessionManager&) = delete;
  SessionManager& operator=(const SessionManager&) = delete;

  bool has_remote() const { return remote_ != nullptr; }

  // Session calls, as Engine's (engine/engine.h).
  void Open(absl::Duration ttl, const std::string& tenant, SessionCallback done);
  void Fork(const std::string& parent_id, absl::Duration ttl, const std::string& tenant,
            SessionCallback done);
  void Close(const std::string& id, const std::string& tenant, StatusCallback done);
  void Get(const std::string& id, const std::string& tenant, SessionCallback done);

  struct TurnRequest {
    RequestId request = 0;
    std::string session_id;
    std::string tenant;
    std::vector<int32_t> new_tokens;
    std::optional<int32_t> bos_if_empty;
    std::vector<int32_t> separator;
    int32_t end_token = -1;
    absl::Time deadline = absl::InfiniteFuture();
  };
  // A started turn: its context, and what its end needs.
  struct Turn {
    std::vector<int32_t> context;  // history [+ BOS] [+ separator] + new tokens
    int32_t history_tokens = 0;
    int64_t version = 0;       // the record version the turn started from (0: none)
    std::string lease_holder;  // empty: no lease was taken
  };
  // Starts a turn (SessionStore::BeginTurn's rules and statuses, plus those of the
  // record sync above). `done` gets the turn or the status to finish the request with.
  void BeginTurn(TurnRequest request, std::function<void(absl::StatusOr<Turn>)> done);

  // Step thread. Ends `turn` of session `id`, run by sequence `seq` with chain root
  // `root`. `tokens` (the sequence's tokens) when it completed, else null (history
  // unchanged). A completed turn of a session still open pins the sequence's committed
  // chain (before the caller closes the sequence's block table; `has_table` says it has
  // one). Returns true when the turn is being committed to the session cache service:
  // `done` then runs once, later, with OK or the commit's failure (see the header
  // comment), and the turn is acknowledged only after it. Returns false (and never
  // calls `done`) when the turn has ended already: no session cache service, a turn
  // that did not complete, a session closed meanwhile.
  bool EndTurn(const std::string& id, const Turn& turn, cache::SequenceId seq,
               const cache::BlockHash& root, const std::vector<int32_t>* tokens, bool has_table,
               cache::KvCacheManager* kv, StatusCallback done);
  // Any thread: undoes a started turn that never ran (the request was refused after
  // BeginTurn): history unchanged, the lease given back.
  void AbandonTurn(const std::string& id, const Turn& turn);
  // Step thread: expires idle sessions (at most once a second of clock time) and
  // applies forks and removals to kv's session pins.
  void Maintain(absl::Time now, cache::KvCacheManager* kv);
  // Step thread, at shutdown: every session lets go of its blocks.
  void ReleaseAll(cache::KvCacheManager* kv);

  int32_t size() const { return store_.size(); }
  std::optional<absl::Time> NextExpiry() const { return store_.NextExpiry(); }
  absl::Time next_sweep() const { return next_sweep_; }

  struct Stats {
    int64_t restored_total = 0;   // sessions unknown here, continued from the service
    int64_t refreshed_total = 0;  // local copies replaced by a record of another version
    int64_t commits_total = 0;    // turns committed to the service
    int64_t conflicts_total = 0;  // turns refused: another turn held the lease, or a commit
                                  // found the session changed or closed
    int64_t errors_total = 0;     // session cache calls that failed (unreachable, timeout)
  };
  Stats stats() const;

 private:
  // The record of `id` as this copy has it; `root` is the chain root of its last turn
  // (for the head block's hash).
  std::optional<cache::RemoteSession> RecordOf(const std::string& id,
                                               const cache::BlockHash& root) const;
  // The service's record of `id`, checked: NOT_FOUND unless it is for this model and
  // `tenant`'s (a tombstone passes, with `closed`), DATA_LOSS for token ids out of range
  // or turn ends out of order; the call's own errors as they are.
  absl::StatusOr<cache::RemoteSession> ReadRecord(const std::string& id, const std::string& tenant,
                                                  const cache::LeaseRequest* lease,
                                                  absl::Time deadline);
  // Makes the local copy the record (restores it when unknown here).
  void AdoptRecord(cache::RemoteSession record, absl::Time now);
  // Reads the record of `id` (with `lease`: taking it) and brings the local copy to it:
  // the record's version, or nullopt when the service has no record (the local copy
  // stands). A tombstone closes the local copy: NOT_FOUND. Other errors as ReadRecord's
  // (ABORTED: another holder's lease).
  absl::StatusOr<std::optional<int64_t>> Sync(const std::string& id, const std::string& tenant,
                                              const cache::LeaseRequest* lease,
                                              absl::Time deadline);
  // Writes the record of new session `id` (version 1) and notes its version. When the
  // write fails, the local copy is removed and the status to answer with returned
  // (UNAVAILABLE): a session only this replica knows would be NOT_FOUND on any other.
  absl::Status CreateRecord(const std::string& id, const std::string& tenant);
  // After a commit of `record` (from `version`) whose outcome is unknown (`failure`: a
  // timeout, a dropped connection): fences later arrivals of that write with a lease of
  // its own and reads the record. OK when the write landed (the turn is recorded);
  // UNAVAILABLE "not recorded; retry" when it did not; UNAVAILABLE saying the outcome is
  // unknown (no retry without reading the session first) when the service still does
  // not answer.
  absl::Status ResolveUnknownCommit(const std::string& id, const cache::RemoteSession& record,
                                    int64_t version, const absl::Status& failure);
  // Counts a failed call (not a refusal) and returns the status a client gets.
  absl::Status Unreachable(const absl::Status& status, const char* what);
  std::string NewLeaseHolder(RequestId request);
  // Stops renewing `turn`'s lease and gives it back (worker thread).
  void ReleaseTurnLease(const std::string& id, const Turn& turn);
  absl::Time Deadline(absl::Time limit = absl::InfiniteFuture()) const;

  // The worker: runs posted tasks in order and renews the leases of running turns.
  void Post(std::function<void()> task);
  void WorkerLoop();
  void RenewDueLeases();

  const Options options_;
  cache::RemoteKvCache* const remote_;
  const cache::KvCacheManager* const kv_;
  const common::Clock* const clock_;
  const cache::BlockHash partition_;  // kv_->RootHash(""): where session records are filed
  std::string instance_;              // random: lease holders differ across processes
  SessionStore store_;                // thread-safe
  absl::Time next_sweep_ = absl::InfinitePast();  // step thread

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  // Leases of running turns: holder -> (session id, next renewal).
  struct Lease {
    std::string session_id;
    absl::Time renew_at;
  };
  std::map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);

  std::mutex join_mu_;
  std::thread worker_;  // last: started after everything it uses
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_SESSION_MANAGER_H_
