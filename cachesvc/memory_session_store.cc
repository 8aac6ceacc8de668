#include "cachesvc/memory_session_store.h"

#include "absl/strings/str_cat.h"

namespace kvserve::cachesvc {

void MemorySessionStore::EraseLocked(std::map<std::string, StoredSession>::iterator it) {
  by_expiry_.erase({it->second.expires_at, it->first});
  if (it->second.closed) --tombstones_;
  sessions_.erase(it);
}

void MemorySessionStore::DropExpired(absl::Time now) {
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
    EraseLocked(sessions_.find(by_expiry_.begin()->second));
  }
}

absl::Status MemorySessionStore::InsertLocked(StoredSession session) {
  if (static_cast<int64_t>(sessions_.size()) >= options_.max_records) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session records: the limit of ", options_.max_records, " is reached"));
  }
  by_expiry_.emplace(session.expires_at, session.id);
  if (session.closed) ++tombstones_;
  std::string id = session.id;
  sessions_.emplace(std::move(id), std::move(session));
  return absl::OkStatus();
}

absl::StatusOr<SessionUpdate> MemorySessionStore::Update(const std::string& id,
                                                         const SessionMutation& mutate,
                                                         absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  DropExpired(now);
  // The record moves out of the map for the mutation and back (or its successor in).
  SessionUpdate update;
  auto it = sessions_.find(id);
  if (it != sessions_.end()) {
    by_expiry_.erase({it->second.expires_at, id});
    if (it->second.closed) --tombstones_;
    update.record = std::move(it->second);
    sessions_.erase(it);
  }
  absl::StatusOr<bool> write = mutate(update.record);
  if (!write.ok() || !*write) {
    // Unchanged (see SessionMutation): it goes back, and the caller gets a copy.
    if (update.record.has_value()) {
      StoredSession copy = *update.record;
      (void)InsertLocked(std::move(copy));  // the slot it freed is there
    }
    if (!write.ok()) return write.status();
    return update;
  }
  if (update.record.has_value()) {
    update.record->id = id;
    StoredSession copy = *update.record;
    if (absl::Status s = InsertLocked(std::move(copy)); !s.ok()) return s;
  }
  update.written = true;
  return update;
}

absl::Status MemorySessionStore::Put(StoredSession session, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  DropExpired(now);
  if (auto it = sessions_.find(session.id); it != sessions_.end()) {
    EraseLocked(it);
    return InsertLocked(std::move(session));  // the slot it freed is there
  }
  return InsertLocked(std::move(session));
}

absl::StatusOr<StoredSession> MemorySessionStore::Get(const std::string& id, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.expires_at <= now) {
    return absl::NotFoundError(absl::StrCat("no session \"", id, "\""));
  }
  return it->second;
}

absl::Status MemorySessionStore::Delete(const std::string& id, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("no session \"", id, "\""));
  const bool expired = it->second.expires_at <= now;
  EraseLocked(it);
  if (expired) return absl::NotFoundError(absl::StrCat("no session \"", id, "\""));
  return absl::OkStatus();
}

absl::StatusOr<SessionRecordStore::Page> MemorySessionStore::List(const BlockHash* partition,
                                                                  int32_t page_size,
                                                                  const std::string& page_token,
                                                                  absl::Time now) {
  Page page;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = page_token.empty() ? sessions_.begin() : sessions_.upper_bound(page_token);
  for (; it != sessions_.end(); ++it) {
    const StoredSession& s = it->second;
    if (s.expires_at <= now || s.closed || (partition != nullptr && s.partition != *partition)) {
      continue;
    }
    if (static_cast<int32_t>(page.sessions.size()) == page_size) {
      page.next_page_token = page.sessions.back().id;
      break;
    }
    StoredSession summary;
    summary.id = s.id;
    summary.partition = s.partition;
    summary.has_head = s.has_head;
    summary.head = s.head;
    summary.owner = s.owner;
    summary.expires_at = s.expires_at;
    summary.version = s.version;
    page.sessions.push_back(std::move(summary));
  }
  return page;
}

int64_t MemorySessionStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(sessions_.size()) - tombstones_;
}

}  // namespace kvserve::cachesvc
