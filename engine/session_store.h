// Conversation sessions: token history, time-to-live and the one-turn-at-a-time rule.
#ifndef KVSERVE_ENGINE_SESSION_STORE_H_
#define KVSERVE_ENGINE_SESSION_STORE_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/context_limits.h"
#include "engine/engine.h"

namespace kvserve::engine {

// Holds each open session's token history (every prompt and generated token of its
// completed turns, so a turn never re-tokenizes history) and its expiry. A session
// expires `ttl` after its last activity (open, fork, end of a turn) unless a turn is
// running. A session's KV blocks are not kept here: they live in the session tier of
// cache::KvCacheManager, and the session cache record lives in kvserve-cache: both are
// driven by engine::SessionManager (engine/session_manager.h), the one owner of a
// session's life, which takes this store's forks and removals through TakeEvents();
// this store never calls anyone.
//
// Ownership: every session has an owner (the tenant that opened it; empty when the
// front end authenticates nobody), fixed when it is opened, forked or restored. Every
// call that names a session takes the caller's owner and treats a session owned by
// someone else exactly as an unknown id: the same NOT_FOUND message, and no other
// effect (it is neither expired, touched nor counted), so a caller cannot learn that
// another tenant's session exists.
//
// Threading: every method is thread-safe (one internal mutex).
class SessionStore {
 public:
  struct Options {
    int32_t max_sessions = 4096;  // open sessions; more -> RESOURCE_EXHAUSTED
    // Open sessions of one non-empty owner; more -> RESOURCE_EXHAUSTED naming
    // max_sessions_per_tenant. 0 = no per-owner limit. Sessions with an empty owner
    // count only against max_sessions.
    int32_t max_sessions_per_owner = 0;
    int32_t max_session_tokens = 8192;  // history limit; a turn beyond -> RESOURCE_EXHAUSTED
    absl::Duration default_ttl = absl::Minutes(10);  // used when Open/Fork get ttl <= 0
    absl::Duration max_ttl = absl::Hours(24);        // larger ttl -> INVALID_ARGUMENT
    ContextLimits context;  // a turn's whole context beyond -> FieldError (checked first)
  };

  // What the step thread must do with the session tier, in order.
  struct Event {
    enum class Kind { kForked, kRemoved };
    Kind kind;
    std::string id;         // the new child (kForked) or the removed session
    std::string parent_id;  // kForked only
  };

  // Session ids are "s-" + 32 hex digits (128 bits) from the operating system's secure
  // random source: they are the only credential a session has, so they depend on no
  // seed and differ across restarts and replicas.
  explicit SessionStore(const Options& options);

  // Opens a session owned by `owner`. RESOURCE_EXHAUSTED for max_sessions or
  // max_sessions_per_owner; INTERNAL if the secure random source fails (no id is ever
  // made up without it).
  absl::StatusOr<SessionInfo> Open(absl::Duration ttl, const std::string& owner, absl::Time now);
  // A new session of `owner` with a copy of the parent's history (as of its last
  // completed turn). NOT_FOUND (SessionNotFound) when the parent is unknown, expired or
  // not `owner`'s; RESOURCE_EXHAUSTED as Open.
  absl::StatusOr<SessionInfo> Fork(const std::string& parent_id, absl::Duration ttl,
                                   const std::string& owner, absl::Time now);
  // NOT_FOUND (SessionNotFound) when unknown, expired or not `owner`'s. A running turn
  // finishes but is not recorded.
  absl::Status Close(const std::string& id, const std::string& owner, absl::Time now);
  // NOT_FOUND as Close.
  absl::StatusOr<SessionInfo> Get(const std::string& id, const std::string& owner, absl::Time now);
  // The NOT_FOUND status every method gives for an id that is unknown, expired or
  // someone else's (one message for all three).
  static absl::Status SessionNotFound(const std::string& id);
  // The ABORTED status a turn gets while another turn of the session runs, here or on
  // another replica (a conflict the client resolves by retrying after the running turn:
  // the service adds a retry hint).
  static absl::Status SessionBusy(const std::string& id);

  struct Turn {
    std::vector<int32_t> context;  // history [+ BOS] + new tokens
    int32_t history_tokens = 0;    // of which history
  };
  // Starts a turn that appends `new_tokens` (after `bos_if_empty`, when given and the
  // history is empty; after `separator_if_history` when the history is not empty, less
  // its tokens up to and including the first `end_token` when the history already ends
  // with `end_token`; decided under the store's lock): returns the whole context and
  // marks the session busy. NOT_FOUND (unknown,
  // expired or not `owner`'s), ABORTED (SessionBusy: a turn is running), FieldError "prompt_tokens"
  // (CheckContextFits against options.context), RESOURCE_EXHAUSTED (history would exceed
  // max_session_tokens).
  absl::StatusOr<Turn> BeginTurn(const std::string& id, const std::string& owner,
                                 const std::vector<int32_t>& new_tokens,
                                 std::optional<int32_t> bos_if_empty, absl::Time now,
                                 std::span<const int32_t> separator_if_history = {},
                                 int32_t end_token = -1);
  // Ends the turn started by BeginTurn. With `history`, it becomes the stored history
  // (the turn completed); without, the history is unchanged (cancelled or failed).
  // Returns false when the session was closed meanwhile.
  bool EndTurn(const std::string& id, const std::vector<int32_t>* history, absl::Time now);

  // Re-creates a session known elsewhere (the session cache service) under its own id,
  // owned by `owner` (the record's), with `history` and `turn_ends` (token offsets where
  // its turns ended) at record `version`, as if opened here with `ttl` (clamped to
  // [default, max]). OK when `id` is open here already (restored meanwhile; nothing
  // changes, whoever owns it).
  // RESOURCE_EXHAUSTED for the session limits or a history over max_session_tokens;
  // INVALID_ARGUMENT for an id that is not "s-" + 32 lower-case hex digits.
  absl::Status Restore(const std::string& id, const std::string& owner,
                       std::vector<int32_t> history, std::vector<int32_t> turn_ends,
                       absl::Duration ttl, absl::Time now, int64_t version = 0);
  // Brings session `id` of `owner` to the session cache service's record of it (the one
  // truth of the conversation across replicas; engine/session_manager.h): when the
  // session is not open here it is restored (as Restore, kRestored); when it is open and
  // idle, its history, turn ends and version become the record's (kRefreshed when the
  // version differed, else kUnchanged). kUnchanged, with nothing changed, when it is
  // running a turn, belongs to someone else, or the history exceeds max_session_tokens;
  // an error only when a restore fails (as Restore).
  enum class AdoptOutcome { kUnchanged, kRefreshed, kRestored };
  absl::StatusOr<AdoptOutcome> Adopt(const std::string& id, const std::string& owner,
                                     std::vector<int32_t> history, std::vector<int32_t> turn_ends,
                                     int64_t version, absl::Duration ttl, absl::Time now);
  // Sets the version of the session cache record this copy now equals (after this
  // replica committed it). No effect on an unknown id.
  void SetVersion(const std::string& id, int64_t version);
  // A session's history, turn ends, ttl, owner and record version (nullopt when unknown
  // or expired).
  struct Snapshot {
    std::vector<int32_t> history;
    std::vector<int32_t> turn_ends;
    absl::Duration ttl;
    std::string owner;
    int64_t version = 0;
  };
  std::optional<Snapshot> GetSnapshot(const std::string& id) const;

  // Removes idle sessions whose expiry has passed (each yields a kRemoved event).
  void ExpireIdle(absl::Time now);
  // Forks and removals since the last call, in the order they happened.
  std::vector<Event> TakeEvents();
  int32_t size() const;
  // The earliest expiry among idle sessions, if any.
  std::optional<absl::Time> NextExpiry() const;

 private:
  struct Session {
    std::string owner;
    std::vector<int32_t> history;
    std::vector<int32_t> turn_ends;  // history offsets where completed turns ended
    absl::Duration ttl;
    absl::Time expires_at;
    bool busy = false;
    // The session cache record version this copy equals (0: none known).
    int64_t version = 0;
  };
  absl::StatusOr<absl::Duration> CheckTtl(absl::Duration ttl) const;
  // RESOURCE_EXHAUSTED when a session limit (max_sessions, or max_sessions_per_owner
  // for a non-empty `owner`) is reached even after purging expired sessions.
  absl::Status MakeRoomLocked(const std::string& owner, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The limit `owner` has reached, if any (no purge).
  absl::Status CheckRoomLocked(const std::string& owner) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finds a live session, removing it first if it has expired.
  Session* FindLive(const std::string& id, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FindLive, for `owner` only: another owner's session is left alone (not even
  // expired) and yields null, as an unknown id does.
  Session* FindOwned(const std::string& id, const std::string& owner, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds session `id` of `owner` (not present) and counts it.
  Session& InsertLocked(const std::string& id, const std::string& owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::string> NewIdLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static SessionInfo Info(const std::string& id, const Session& s);

  const Options options_;
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
  // Sessions in sessions_ per non-empty owner (owners with none are absent).
  absl::flat_hash_map<std::string, int32_t> owner_sessions_ ABSL_GUARDED_BY(mu_);
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_SESSION_STORE_H_
