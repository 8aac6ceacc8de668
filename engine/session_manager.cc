#include "engine/session_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/secure_random.h"

namespace kvserve::engine {

SessionManager::SessionManager(const Options& options, cache::RemoteKvCache* remote,
                               const cache::KvCacheManager* kv, const common::Clock* clock)
    : options_(options),
      remote_(remote),
      kv_(kv),
      clock_(clock),
      partition_(kv->RootHash("")),
      store_(options.store) {
  // Lease holders must differ between processes even when replicas share a name.
  absl::StatusOr<std::string> nonce = common::SecureRandomHex(8);
  instance_ = nonce.ok() ? *nonce : absl::StrCat(absl::ToUnixNanos(absl::Now()));
  if (remote_ != nullptr) worker_ = std::thread([this] { WorkerLoop(); });
}

SessionManager::~SessionManager() { Stop(); }

void SessionManager::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(join_mu_);
  if (worker_.joinable()) worker_.join();
}

SessionManager::Stats SessionManager::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

absl::Time SessionManager::Deadline(absl::Time limit) const {
  return std::min(absl::Now() + options_.timeout, limit);
}

std::string SessionManager::NewLeaseHolder(RequestId request) {
  return absl::StrCat(options_.replica, "/", instance_, "/", request);
}

absl::Status SessionManager::Unreachable(const absl::Status& status, const char* what) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.errors_total;
  }
  return absl::UnavailableError(absl::StrCat("the session cache service did not answer (", what,
                                             ": ", status.message(), "); retry"));
}

void SessionManager::Post(std::function<void()> task) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!stopping_) {
      tasks_.push_back(std::move(task));
      cv_.notify_all();
      return;
    }
  }
  task();  // stopped: run here
}

void SessionManager::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (!tasks_.empty()) {
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
      continue;
    }
    if (stopping_) return;
    absl::Time next = absl::InfiniteFuture();
    for (const auto& [holder, lease] : leases_) next = std::min(next, lease.renew_at);
    if (next <= absl::Now()) {
      lock.unlock();
      RenewDueLeases();
      lock.lock();
      continue;
    }
    if (next == absl::InfiniteFuture()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, absl::ToChronoTime(next));
    }
  }
}

void SessionManager::RenewDueLeases() {
  std::vector<std::pair<std::string, std::string>> due;  // holder, session
  const absl::Time now = absl::Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [holder, lease] : leases_) {
      if (lease.renew_at <= now) {
        due.emplace_back(holder, lease.session_id);
        lease.renew_at = now + options_.lease / 3;
      }
    }
  }
  for (const auto& [holder, id] : due) {
    const cache::LeaseRequest lease{holder, options_.lease};
    // A lost lease (expired and taken) shows at the commit, which is then refused.
    absl::StatusOr<cache::RemoteSession> r = remote_->GetSession(id, &lease, Deadline());
    if (!r.ok() && !absl::IsAborted(r.status()) && !absl::IsNotFound(r.status())) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.errors_total;
    }
  }
}

std::optional<cache::RemoteSession> SessionManager::RecordOf(const std::string& id,
                                                             const cache::BlockHash& root) const {
  std::optional<SessionStore::Snapshot> snap = store_.GetSnapshot(id);
  if (!snap.has_value()) return std::nullopt;
  cache::RemoteSession r;
  r.id = id;
  r.partition = partition_;
  r.tokens = std::move(snap->history);
  r.turn_ends = std::move(snap->turn_ends);
  const size_t full = r.tokens.size() / static_cast<size_t>(kv_->block_tokens());
  if (full > 0) {
    r.has_head = true;
    r.head = kv_->ChainHashes(root, r.tokens, static_cast<int32_t>(full)).back();
  }
  r.owner = options_.replica;
  r.tenant = std::move(snap->owner);
  r.ttl = snap->ttl;
  r.version = snap->version;
  return r;
}

absl::StatusOr<cache::RemoteSession> SessionManager::ReadRecord(const std::string& id,
                                                                const std::string& tenant,
                                                                const cache::LeaseRequest* lease,
                                                                absl::Time deadline) {
  absl::StatusOr<cache::RemoteSession> record = remote_->GetSession(id, lease, deadline);
  if (!record.ok()) return record.status();
  auto refuse = [&](absl::Status status) -> absl::Status {
    if (lease != nullptr) remote_->ReleaseLease(id, lease->holder, Deadline()).IgnoreError();
    return status;
  };
  if (record->id != id) return refuse(absl::DataLossError("the session record has another id"));
  // A tombstone closes every copy (the replica that closed it checked the tenant).
  if (record->closed) return record;
  // Another model's (or KV layout's) session is not ours to continue, nor is another
  // tenant's.
  if (record->partition != partition_) return refuse(SessionStore::SessionNotFound(id));
  if (record->tenant != tenant) return refuse(SessionStore::SessionNotFound(id));
  const int64_t n = static_cast<int64_t>(record->tokens.size());
  for (int32_t t : record->tokens) {
    if (t < 0 || t >= options_.vocab_size) {
      return refuse(absl::DataLossError("the session record holds invalid token ids"));
    }
  }
  int32_t previous = 0;
  for (int32_t end : record->turn_ends) {
    if (end < previous || end > n) {
      return refuse(absl::DataLossError("the session record holds invalid turn ends"));
    }
    previous = end;
  }
  if (!record->turn_ends.empty() && previous != n) {
    return refuse(absl::DataLossError("the session record's last turn end is not its end"));
  }
  return record;
}

void SessionManager::AdoptRecord(cache::RemoteSession record, absl::Time now) {
  absl::StatusOr<SessionStore::AdoptOutcome> outcome =
      store_.Adopt(record.id, record.tenant, std::move(record.tokens), std::move(record.turn_ends),
                   record.version, record.ttl, now);
  if (!outcome.ok()) return;  // a restore over a limit: the caller's lookup says NOT_FOUND
  std::lock_guard<std::mutex> lock(mu_);
  if (*outcome == SessionStore::AdoptOutcome::kRestored) ++stats_.restored_total;
  if (*outcome == SessionStore::AdoptOutcome::kRefreshed) ++stats_.refreshed_total;
}

absl::Status SessionManager::CreateRecord(const std::string& id, const std::string& tenant) {
  std::optional<cache::RemoteSession> record = RecordOf(id, partition_);
  if (!record.has_value()) return absl::OkStatus();
  absl::StatusOr<int64_t> version = remote_->PutSession(*record, 0, "", Deadline());
  if (version.ok()) {
    store_.SetVersion(id, *version);
    return absl::OkStatus();
  }
  // A session other replicas cannot find is not opened: its id is never handed out (a
  // record written after all, the call having timed out, stays unknown and expires).
  store_.Close(id, tenant, clock_->Now()).IgnoreError();
  return Unreachable(version.status(), "PutSession (the session was not opened)");
}

absl::StatusOr<std::optional<int64_t>> SessionManager::Sync(const std::string& id,
                                                            const std::string& tenant,
                                                            const cache::LeaseRequest* lease,
                                                            absl::Time deadline) {
  absl::StatusOr<cache::RemoteSession> record = ReadRecord(id, tenant, lease, deadline);
  if (absl::IsNotFound(record.status())) return std::optional<int64_t>();
  if (!record.ok()) return record.status();
  const absl::Time now = clock_->Now();
  if (record->closed) {
    store_.Close(id, tenant, now).IgnoreError();
    return SessionStore::SessionNotFound(id);
  }
  const int64_t version = record->version;
  AdoptRecord(*std::move(record), now);
  return std::optional<int64_t>(version);
}

void SessionManager::Open(absl::Duration ttl, const std::string& tenant, SessionCallback done) {
  absl::StatusOr<SessionInfo> info = store_.Open(ttl, tenant, clock_->Now());
  if (remote_ == nullptr || !info.ok()) return done(std::move(info));
  Post([this, info = *info, tenant, done = std::move(done)] {
    // Written before the call answers: a session-affine router may send the first turn
    // to another replica.
    if (absl::Status created = CreateRecord(info.id, tenant); !created.ok()) return done(created);
    done(info);
  });
}

void SessionManager::Fork(const std::string& parent_id, absl::Duration ttl,
                          const std::string& tenant, SessionCallback done) {
  if (remote_ == nullptr) return done(store_.Fork(parent_id, ttl, tenant, clock_->Now()));
  Post([this, parent_id, ttl, tenant, done = std::move(done)] {
    absl::StatusOr<std::optional<int64_t>> synced = Sync(parent_id, tenant, nullptr, Deadline());
    if (absl::IsNotFound(synced.status())) return done(synced.status());
    if (!synced.ok()) return done(Unreachable(synced.status(), "GetSession"));
    absl::StatusOr<SessionInfo> child = store_.Fork(parent_id, ttl, tenant, clock_->Now());
    if (child.ok()) {
      if (absl::Status created = CreateRecord(child->id, tenant); !created.ok()) {
        return done(created);
      }
    }
    done(std::move(child));
  });
}

void SessionManager::Close(const std::string& id, const std::string& tenant, StatusCallback done) {
  absl::Status local = store_.Close(id, tenant, clock_->Now());
  if (remote_ == nullptr) return done(local);
  Post([this, id, tenant, local, done = std::move(done)] {
    if (!local.ok()) {
      // Known only to the service (or closed there already): close it there if it is
      // the caller's and still open.
      absl::StatusOr<cache::RemoteSession> record = ReadRecord(id, tenant, nullptr, Deadline());
      if (!record.ok() && !absl::IsNotFound(record.status())) {
        return done(Unreachable(record.status(), "GetSession"));
      }
      if (!record.ok() || record->closed) return done(local);
    }
    // The tombstone makes every replica's copy unusable.
    const absl::Status deleted = remote_->DeleteSession(id, Deadline());
    if (!deleted.ok()) return done(Unreachable(deleted, "DeleteSession"));
    done(absl::OkStatus());
  });
}

void SessionManager::Get(const std::string& id, const std::string& tenant, SessionCallback done) {
  if (remote_ == nullptr) return done(store_.Get(id, tenant, clock_->Now()));
  Post([this, id, tenant, done = std::move(done)] {
    absl::StatusOr<std::optional<int64_t>> synced = Sync(id, tenant, nullptr, Deadline());
    if (absl::IsNotFound(synced.status())) return done(synced.status());
    // A service that does not answer: the local copy answers (a turn would need it).
    if (!synced.ok()) Unreachable(synced.status(), "GetSession").IgnoreError();
    done(store_.Get(id, tenant, clock_->Now()));
  });
}

void SessionManager::BeginTurn(TurnRequest request,
                               std::function<void(absl::StatusOr<Turn>)> done) {
  auto begin_local = [this](const TurnRequest& r, int64_t version,
                            std::string holder) -> absl::StatusOr<Turn> {
    absl::StatusOr<SessionStore::Turn> begun =
        store_.BeginTurn(r.session_id, r.tenant, r.new_tokens, r.bos_if_empty, clock_->Now(),
                         r.separator, r.end_token);
    if (!begun.ok()) return begun.status();
    return Turn{std::move(begun->context), begun->history_tokens, version, std::move(holder)};
  };
  if (remote_ == nullptr) return done(begin_local(request, 0, ""));
  Post([this, request = std::move(request), done = std::move(done), begin_local] {
    const std::string holder = NewLeaseHolder(request.request);
    const cache::LeaseRequest lease{holder, options_.lease};
    absl::StatusOr<std::optional<int64_t>> synced =
        Sync(request.session_id, request.tenant, &lease, Deadline(request.deadline));
    if (absl::IsAborted(synced.status())) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.conflicts_total;
      }
      return done(SessionStore::SessionBusy(request.session_id));
    }
    if (absl::IsNotFound(synced.status()) || absl::IsDataLoss(synced.status())) {
      return done(synced.status());
    }
    if (!synced.ok()) return done(Unreachable(synced.status(), "GetSession"));
    if (!synced->has_value()) {
      // No record: the local copy goes on and creates it at the commit (version 0).
      store_.SetVersion(request.session_id, 0);
      return done(begin_local(request, 0, ""));
    }
    absl::StatusOr<Turn> turn = begin_local(request, **synced, holder);
    if (!turn.ok()) {
      remote_->ReleaseLease(request.session_id, holder, Deadline()).IgnoreError();
      return done(std::move(turn));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      leases_[holder] = Lease{request.session_id, absl::Now() + options_.lease / 3};
    }
    done(std::move(turn));
  });
}

bool SessionManager::EndTurn(const std::string& id, const Turn& turn, cache::SequenceId seq,
                             const cache::BlockHash& root, const std::vector<int32_t>* tokens,
                             bool has_table, cache::KvCacheManager* kv, StatusCallback done) {
  const bool alive = store_.EndTurn(id, tokens, clock_->Now());
  // The session keeps its history's blocks for the next turn (its previous blocks are
  // released after the new chain is referenced).
  if (alive && tokens != nullptr && has_table) kv->PinSession(id, seq, *tokens);
  if (remote_ == nullptr) return false;
  if (tokens == nullptr || !alive) {
    // Not recorded: the lease goes back (a closed session's turn finishes unrecorded).
    ReleaseTurnLease(id, turn);
    return false;
  }
  if (!turn.lease_holder.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    leases_.erase(turn.lease_holder);
  }
  std::optional<cache::RemoteSession> record = RecordOf(id, root);
  Post([this, id, record = std::move(record), version = turn.version, holder = turn.lease_holder,
        done = std::move(done)]() mutable {
    if (!record.has_value()) return done(absl::OkStatus());  // closed meanwhile
    absl::StatusOr<int64_t> committed = remote_->PutSession(*record, version, holder, Deadline());
    if (committed.ok()) {
      store_.SetVersion(id, *committed);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.commits_total;
      }
      return done(absl::OkStatus());
    }
    // Whatever refused the commit, this turn's lease (if it still holds one) goes back.
    if (!holder.empty()) remote_->ReleaseLease(id, holder, Deadline()).IgnoreError();
    if (absl::IsAborted(committed.status()) || absl::IsFailedPrecondition(committed.status())) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.conflicts_total;
      }
      if (absl::IsFailedPrecondition(committed.status())) {
        store_.Close(id, record->tenant, clock_->Now()).IgnoreError();
        return done(
            absl::NotFoundError(absl::StrCat("session ", id,
                                             " was closed while this turn ran; the turn was not "
                                             "recorded")));
      }
      return done(
          absl::AbortedError(absl::StrCat("session ", id,
                                          " changed on another replica while this turn ran; the "
                                          "turn was not recorded: retry it")));
    }
    done(ResolveUnknownCommit(id, *record, version, committed.status()));
  });
  return true;
}

absl::Status SessionManager::ResolveUnknownCommit(const std::string& id,
                                                  const cache::RemoteSession& record,
                                                  int64_t version, const absl::Status& failure) {
  // The commit timed out or its connection dropped: the service may have applied it, or
  // may still. A lease under a holder of its own (this turn's was given back above) fences
  // it: a write of this turn arriving later meets a live lease not its own and is
  // refused. The record read with that lease says whether the write landed.
  const cache::LeaseRequest fence{.holder = absl::StrCat(NewLeaseHolder(0), "/fence"),
                                  .duration = options_.lease};
  absl::StatusOr<cache::RemoteSession> now = remote_->GetSession(id, &fence, Deadline());
  if (!now.ok()) {
    // Unknown still: never claim either outcome.
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.errors_total;
    }
    return absl::UnavailableError(absl::StrCat(
        "the session cache service did not answer this turn's commit (", failure.message(),
        "); the turn may or may not have been recorded: GetSession's history_tokens tells, "
        "before a retry"));
  }
  remote_->ReleaseLease(id, fence.holder, Deadline()).IgnoreError();
  if (!now->closed && now->version == version + 1 && now->tokens == record.tokens &&
      now->turn_ends == record.turn_ends) {
    store_.SetVersion(id, now->version);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.commits_total;
    return absl::OkStatus();  // it landed: the turn is recorded
  }
  return Unreachable(failure, "PutSession (the turn was not recorded)");
}

void SessionManager::AbandonTurn(const std::string& id, const Turn& turn) {
  store_.EndTurn(id, nullptr, clock_->Now());
  ReleaseTurnLease(id, turn);
}

void SessionManager::ReleaseTurnLease(const std::string& id, const Turn& turn) {
  if (remote_ == nullptr || turn.lease_holder.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leases_.erase(turn.lease_holder);
  }
  Post([this, id, holder = turn.lease_holder] {
    remote_->ReleaseLease(id, holder, Deadline()).IgnoreError();
  });
}

void SessionManager::Maintain(absl::Time now, cache::KvCacheManager* kv) {
  if (now >= next_sweep_) {  // O(sessions): at most once a second of clock time
    store_.ExpireIdle(now);
    next_sweep_ = now + absl::Seconds(1);
  }
  for (const SessionStore::Event& e : store_.TakeEvents()) {
    if (e.kind == SessionStore::Event::Kind::kForked) {
      kv->ForkSession(e.parent_id, e.id);
    } else {
      kv->ReleaseSession(e.id);
    }
  }
}

void SessionManager::ReleaseAll(cache::KvCacheManager* kv) {
  store_.TakeEvents();
  kv->ReleaseAllSessions();
}

}  // namespace kvserve::engine
