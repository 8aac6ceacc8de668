#include "cachesvc/session_index.h"

#include <utility>

#include "absl/hash/hash.h"

namespace kvserve::cachesvc {

absl::StatusOr<std::unique_ptr<SessionIndex>> SessionIndex::Create(SessionRecordStore* records,
                                                                   BlockStore* blocks,
                                                                   absl::Time now) {
  std::unique_ptr<SessionIndex> index(new SessionIndex(records, blocks));
  if (!blocks->takes_session_hints()) return index;  // e.g. Redis: no scan at start
  constexpr int32_t kPage = 1000;
  std::string token;
  do {
    absl::StatusOr<SessionRecordStore::Page> page = records->List(nullptr, kPage, token, now);
    if (!page.ok()) return page.status();
    for (const StoredSession& s : page->sessions) {
      if (!s.has_head || s.closed) continue;
      blocks->SetSession(s.id, s.partition, s.head, s.expires_at);
      ++index->restored_hints_;
    }
    token = page->next_page_token;
  } while (!token.empty());
  return index;
}

absl::StatusOr<SessionUpdate> SessionIndex::Update(const std::string& id,
                                                   const SessionMutation& mutate, absl::Time now) {
  std::lock_guard<std::mutex> lock(stripes_[absl::HashOf(id) % kStripes]);
  absl::StatusOr<SessionUpdate> update = records_->Update(id, mutate, now);
  if (update.ok() && update->written) SetHint(id, update->record, now);
  return update;
}

void SessionIndex::SetHint(const std::string& id, const std::optional<StoredSession>& record,
                           absl::Time now) {
  if (record.has_value() && !record->closed && record->has_head && record->expires_at > now) {
    blocks_->SetSession(id, record->partition, record->head, record->expires_at);
  } else {
    blocks_->RemoveSession(id);
  }
}

}  // namespace kvserve::cachesvc
