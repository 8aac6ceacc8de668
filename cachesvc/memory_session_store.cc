#include "cachesvc/memory_session_store.h"

#include "absl/strings/str_cat.h"

namespace kvserve::cachesvc {

void MemorySessionStore::EraseLocked(std::map<std::string, StoredSession>::iterator it) {
  by_expiry_.erase({it->second.expires_at, it->first});
  sessions_.erase(it);
}

void MemorySessionStore::DropExpired(absl::Time now) {
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
    sessions_.erase(by_expiry_.begin()->second);
    by_expiry_.erase(by_expiry_.begin());
  }
}

absl::Status MemorySessionStore::Put(StoredSession session, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  DropExpired(now);
  auto it = sessions_.find(session.id);
  if (it != sessions_.end()) {
    EraseLocked(it);
  } else if (static_cast<int64_t>(sessions_.size()) >= options_.max_records) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session records: the limit of ", options_.max_records, " is reached"));
  }
  by_expiry_.emplace(session.expires_at, session.id);
  std::string id = session.id;
  sessions_.emplace(std::move(id), std::move(session));
  return absl::OkStatus();
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
    if (s.expires_at <= now || (partition != nullptr && s.partition != *partition)) continue;
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
    page.sessions.push_back(std::move(summary));
  }
  return page;
}

int64_t MemorySessionStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(sessions_.size());
}

}  // namespace kvserve::cachesvc
