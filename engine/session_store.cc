#include "engine/session_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/secure_random.h"

namespace kvserve::engine {

SessionStore::SessionStore(const Options& options) : options_(options) {}

absl::StatusOr<absl::Duration> SessionStore::CheckTtl(absl::Duration ttl) const {
  if (ttl <= absl::ZeroDuration()) return options_.default_ttl;
  if (ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("ttl must be <= ", absl::FormatDuration(options_.max_ttl), ", got ",
                     absl::FormatDuration(ttl)));
  }
  return ttl;
}

absl::StatusOr<std::string> SessionStore::NewIdLocked() {
  while (true) {
    absl::StatusOr<std::string> hex = common::SecureRandomHex(16);
    if (!hex.ok()) return hex.status();
    std::string id = absl::StrCat("s-", *hex);
    if (!sessions_.contains(id)) return id;  // a collision has probability ~n / 2^128
  }
}

absl::Status SessionStore::SessionBusy(const std::string& id) {
  return absl::AbortedError(
      absl::StrCat("session ", id, " has a turn running; retry when it has ended"));
}

absl::Status SessionStore::SessionNotFound(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("session ", id, " not found"));
}

absl::Status SessionStore::CheckRoomLocked(const std::string& owner) const {
  if (static_cast<int32_t>(sessions_.size()) >= options_.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many open sessions (limit ", options_.max_sessions, ")"));
  }
  if (owner.empty() || options_.max_sessions_per_owner <= 0) return absl::OkStatus();
  auto it = owner_sessions_.find(owner);
  if (it != owner_sessions_.end() && it->second >= options_.max_sessions_per_owner) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many open sessions for this tenant (max_sessions_per_tenant ",
                     options_.max_sessions_per_owner, ")"));
  }
  return absl::OkStatus();
}

absl::Status SessionStore::MakeRoomLocked(const std::string& owner, absl::Time now) {
  if (CheckRoomLocked(owner).ok()) return absl::OkStatus();
  // Purge expired sessions before refusing.
  std::vector<std::string> expired;
  for (const auto& [id, s] : sessions_) {
    if (!s.busy && now >= s.expires_at) expired.push_back(id);
  }
  for (const auto& id : expired) RemoveLocked(id);
  return CheckRoomLocked(owner);
}

SessionInfo SessionStore::Info(const std::string& id, const Session& s) {
  SessionInfo info;
  info.id = id;
  info.history_tokens = static_cast<int32_t>(s.history.size());
  info.expires_at = s.busy ? absl::InfiniteFuture() : s.expires_at;
  info.busy = s.busy;
  return info;
}

SessionStore::Session& SessionStore::InsertLocked(const std::string& id, const std::string& owner) {
  Session& s = sessions_[id];
  s.owner = owner;
  if (!owner.empty()) ++owner_sessions_[owner];
  return s;
}

void SessionStore::RemoveLocked(const std::string& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  if (const std::string& owner = it->second.owner; !owner.empty()) {
    auto count = owner_sessions_.find(owner);
    if (--count->second == 0) owner_sessions_.erase(count);
  }
  sessions_.erase(it);
  events_.push_back({Event::Kind::kRemoved, id, ""});
}

SessionStore::Session* SessionStore::FindLive(const std::string& id, absl::Time now) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return nullptr;
  if (!it->second.busy && now >= it->second.expires_at) {
    RemoveLocked(id);
    return nullptr;
  }
  return &it->second;
}

SessionStore::Session* SessionStore::FindOwned(const std::string& id, const std::string& owner,
                                               absl::Time now) {
  auto it = sessions_.find(id);
  // Checked before FindLive, which may expire the session: a caller must not be able
  // to affect another owner's session in any way.
  if (it == sessions_.end() || it->second.owner != owner) return nullptr;
  return FindLive(id, now);
}

absl::StatusOr<SessionInfo> SessionStore::Open(absl::Duration ttl, const std::string& owner,
                                               absl::Time now) {
  absl::StatusOr<absl::Duration> checked = CheckTtl(ttl);
  if (!checked.ok()) return checked.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status room = MakeRoomLocked(owner, now); !room.ok()) return room;
  absl::StatusOr<std::string> new_id = NewIdLocked();
  if (!new_id.ok()) return new_id.status();
  const std::string& id = *new_id;
  Session& s = InsertLocked(id, owner);
  s.ttl = *checked;
  s.expires_at = now + s.ttl;
  return Info(id, s);
}

absl::StatusOr<SessionInfo> SessionStore::Fork(const std::string& parent_id, absl::Duration ttl,
                                               const std::string& owner, absl::Time now) {
  absl::StatusOr<absl::Duration> checked = CheckTtl(ttl);
  if (!checked.ok()) return checked.status();
  std::lock_guard<std::mutex> lock(mu_);
  Session* parent = FindOwned(parent_id, owner, now);
  if (parent == nullptr) return SessionNotFound(parent_id);
  if (absl::Status room = CheckRoomLocked(owner); !room.ok()) return room;
  std::vector<int32_t> history = parent->history;  // `parent` may move on insertion
  std::vector<int32_t> turn_ends = parent->turn_ends;
  absl::StatusOr<std::string> new_id = NewIdLocked();
  if (!new_id.ok()) return new_id.status();
  const std::string& id = *new_id;
  Session& s = InsertLocked(id, owner);
  s.history = std::move(history);
  s.turn_ends = std::move(turn_ends);
  s.ttl = *checked;
  s.expires_at = now + s.ttl;
  events_.push_back({Event::Kind::kForked, id, parent_id});
  return Info(id, s);
}

absl::Status SessionStore::Close(const std::string& id, const std::string& owner, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (FindOwned(id, owner, now) == nullptr) return SessionNotFound(id);
  RemoveLocked(id);
  return absl::OkStatus();
}

absl::StatusOr<SessionInfo> SessionStore::Get(const std::string& id, const std::string& owner,
                                              absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  Session* s = FindOwned(id, owner, now);
  if (s == nullptr) return SessionNotFound(id);
  return Info(id, *s);
}

absl::StatusOr<SessionStore::Turn> SessionStore::BeginTurn(
    const std::string& id, const std::string& owner, const std::vector<int32_t>& new_tokens,
    std::optional<int32_t> bos_if_empty, absl::Time now, std::span<const int32_t> separator,
    int32_t end_token) {
  std::lock_guard<std::mutex> lock(mu_);
  Session* s = FindOwned(id, owner, now);
  if (s == nullptr) return SessionNotFound(id);
  if (s->busy) return SessionBusy(id);
  const bool add_bos = bos_if_empty.has_value() && s->history.empty();
  if (s->history.empty()) {
    separator = {};
  } else if (end_token >= 0 && s->history.back() == end_token) {
    const auto end = std::find(separator.begin(), separator.end(), end_token);
    if (end != separator.end()) separator = separator.subspan(end - separator.begin() + 1);
  }
  const size_t total = s->history.size() + separator.size() + new_tokens.size() + (add_bos ? 1 : 0);
  if (absl::Status fits =
          CheckContextFits(options_.context, total, static_cast<int32_t>(s->history.size()));
      !fits.ok()) {
    return fits;
  }
  if (total >= static_cast<size_t>(options_.max_session_tokens)) {
    return absl::ResourceExhaustedError(absl::StrCat("session ", id, " would hold ", total,
                                                     " tokens; the limit is ",
                                                     options_.max_session_tokens));
  }
  Turn turn;
  turn.history_tokens = static_cast<int32_t>(s->history.size());
  turn.context.reserve(total);
  turn.context.insert(turn.context.end(), s->history.begin(), s->history.end());
  if (add_bos) turn.context.push_back(*bos_if_empty);
  turn.context.insert(turn.context.end(), separator.begin(), separator.end());
  turn.context.insert(turn.context.end(), new_tokens.begin(), new_tokens.end());
  s->busy = true;
  return turn;
}

bool SessionStore::EndTurn(const std::string& id, const std::vector<int32_t>* history,
                           absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return false;
  Session& s = it->second;
  s.busy = false;
  if (history != nullptr) {
    s.history = *history;
    s.turn_ends.push_back(static_cast<int32_t>(s.history.size()));
  }
  s.expires_at = now + s.ttl;
  return true;
}

absl::Status SessionStore::Restore(const std::string& id, const std::string& owner,
                                   std::vector<int32_t> history, std::vector<int32_t> turn_ends,
                                   absl::Duration ttl, absl::Time now, int64_t version) {
  const bool well_formed =
      id.size() == 34 && id.starts_with("s-") && std::all_of(id.begin() + 2, id.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
      });
  if (!well_formed) return absl::InvalidArgumentError("session id is not one kvserve issues");
  if (static_cast<int64_t>(history.size()) > options_.max_session_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat("session history of ", history.size(),
                                                     " tokens exceeds the limit of ",
                                                     options_.max_session_tokens));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (FindLive(id, now) != nullptr) return absl::OkStatus();
  if (absl::Status room = MakeRoomLocked(owner, now); !room.ok()) return room;
  Session& s = InsertLocked(id, owner);
  s.history = std::move(history);
  s.turn_ends = std::move(turn_ends);
  s.version = version;
  s.ttl = std::clamp(ttl, options_.default_ttl, options_.max_ttl);
  s.expires_at = now + s.ttl;
  return absl::OkStatus();
}

absl::StatusOr<SessionStore::AdoptOutcome> SessionStore::Adopt(
    const std::string& id, const std::string& owner, std::vector<int32_t> history,
    std::vector<int32_t> turn_ends, int64_t version, absl::Duration ttl, absl::Time now) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sessions_.contains(id)) {
      if (static_cast<int64_t>(history.size()) > options_.max_session_tokens) {
        return AdoptOutcome::kUnchanged;
      }
      Session* s = FindOwned(id, owner, now);
      if (s == nullptr || s->busy) return AdoptOutcome::kUnchanged;
      const bool newer = s->version != version;
      s->history = std::move(history);
      s->turn_ends = std::move(turn_ends);
      s->version = version;
      return newer ? AdoptOutcome::kRefreshed : AdoptOutcome::kUnchanged;
    }
  }
  absl::Status restored =
      Restore(id, owner, std::move(history), std::move(turn_ends), ttl, now, version);
  if (!restored.ok()) return restored;
  return AdoptOutcome::kRestored;
}

void SessionStore::SetVersion(const std::string& id, int64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it != sessions_.end()) it->second.version = version;
}

std::optional<SessionStore::Snapshot> SessionStore::GetSnapshot(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  return Snapshot{it->second.history, it->second.turn_ends, it->second.ttl, it->second.owner,
                  it->second.version};
}

void SessionStore::ExpireIdle(absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> expired;
  for (const auto& [id, s] : sessions_) {
    if (!s.busy && now >= s.expires_at) expired.push_back(id);
  }
  for (const auto& id : expired) RemoveLocked(id);
}

std::vector<SessionStore::Event> SessionStore::TakeEvents() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Event> out;
  out.swap(events_);
  return out;
}

int32_t SessionStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(sessions_.size());
}

std::optional<absl::Time> SessionStore::NextExpiry() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<absl::Time> next;
  for (const auto& [id, s] : sessions_) {
    if (!s.busy && (!next.has_value() || s.expires_at < *next)) next = s.expires_at;
  }
  return next;
}

}  // namespace kvserve::engine
