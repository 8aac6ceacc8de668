#include "cachesvc/redis_session_store.h"

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cachesvc/session_encoding.h"

namespace kvserve::cachesvc {
namespace {

constexpr std::string_view kKeyPrefix = "kvs:";
constexpr int32_t kDefaultPageSize = 100;
constexpr int32_t kMaxPageSize = 1000;

std::string SessionKey(std::string_view id) { return std::string(kKeyPrefix) + std::string(id); }

// The expiry of a key with PTTL reply `pttl` read at `now`; false when the key is gone.
bool ExpiryFromPttl(const redisReply& pttl, absl::Time now, absl::Time* expires_at) {
  if (pttl.type != REDIS_REPLY_INTEGER || pttl.integer == -2) return false;
  *expires_at = pttl.integer < 0 ? absl::InfiniteFuture() : now + absl::Milliseconds(pttl.integer);
  return true;
}

// A PX argument: milliseconds from `now` to `expires_at`, rounded up, at least 1.
std::string TtlMs(absl::Time expires_at, absl::Time now) {
  return absl::StrCat(std::max<int64_t>(
      1, absl::ToInt64Milliseconds(absl::Ceil(expires_at - now, absl::Milliseconds(1)))));
}

// Update's write: KEYS[1] the key; ARGV[1] "1" when the key must still hold exactly
// ARGV[2], "0" when it must still be absent; ARGV[3] "set" (ARGV[4] as the value, with
// PX ARGV[5] unless it is "0") or "del". Returns 1 when written, 0 when the key changed.
constexpr char kCompareAndSetScript[] = R"lua(
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if cur ~= ARGV[2] then return 0 end
elseif cur then
  return 0
end
if ARGV[3] == 'del' then
  redis.call('DEL', KEYS[1])
elseif ARGV[5] == '0' then
  redis.call('SET', KEYS[1], ARGV[4])
else
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
end
return 1
)lua";

// Bytes of a value size() reads: through version 3's `closed` byte.
constexpr size_t kClosedFlagOffset = 45;

}  // namespace

absl::StatusOr<std::unique_ptr<RedisSessionStore>> RedisSessionStore::Create(
    std::shared_ptr<RedisClient> client, const Options& options) {
  if (client == nullptr) return absl::InvalidArgumentError("redis session store: no client");
  if (options.max_owner_bytes < 0 || options.scan_count < 1 || options.max_update_attempts < 1) {
    return absl::InvalidArgumentError(
        "redis session store: max_owner_bytes must be >= 0, scan_count and "
        "max_update_attempts >= 1");
  }
  return std::unique_ptr<RedisSessionStore>(new RedisSessionStore(std::move(client), options));
}

void RedisSessionStore::DropCorrupt(const std::string& key) {
  corrupt_values_.fetch_add(1);
  (void)client_->Run({"DEL", key});
}

absl::Status RedisSessionStore::Put(StoredSession session, absl::Time now) {
  if (session.owner.size() > static_cast<size_t>(options_.max_owner_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat("session owner is ", session.owner.size(),
                                                     " bytes, over max_owner_bytes (",
                                                     options_.max_owner_bytes, ")"));
  }
  const std::string key = SessionKey(session.id);
  if (session.expires_at <= now) {
    absl::StatusOr<RedisReply> reply = client_->Run({"DEL", key});
    return reply.ok() ? absl::OkStatus() : reply.status();
  }
  const std::string value = EncodeSessionValue(session);
  RedisCommand command = {"SET", key, value};
  std::string ttl_ms;
  if (session.expires_at != absl::InfiniteFuture()) {
    ttl_ms = TtlMs(session.expires_at, now);
    command.push_back("PX");
    command.push_back(ttl_ms);
  }
  absl::StatusOr<RedisReply> reply = client_->Run(command);
  if (!reply.ok()) return reply.status();
  if (IsRedisError(**reply, "OOM")) {
    return absl::ResourceExhaustedError("redis refused the session record: out of memory");
  }
  if ((*reply)->type == REDIS_REPLY_ERROR) return RedisErrorStatus("SET", **reply);
  return absl::OkStatus();
}

absl::StatusOr<SessionUpdate> RedisSessionStore::Update(const std::string& id,
                                                        const SessionMutation& mutate,
                                                        absl::Time now) {
  const std::string key = SessionKey(id);
  const std::vector<RedisCommand> read = {{"GET", key}, {"PTTL", key}};
  for (int32_t attempt = 0; attempt < options_.max_update_attempts; ++attempt) {
    absl::StatusOr<std::vector<RedisReply>> replies = client_->Pipeline(read);
    if (!replies.ok()) return replies.status();
    const redisReply& value = *(*replies)[0];
    if (value.type == REDIS_REPLY_ERROR) return RedisErrorStatus("GET", value);
    SessionUpdate update;
    std::string old_value;
    const bool existed = value.type != REDIS_REPLY_NIL;
    if (existed) {
      StoredSession current;
      current.id = id;
      old_value.assign(value.str == nullptr ? "" : value.str, value.len);
      if (value.type != REDIS_REPLY_STRING || !DecodeSessionValue(old_value, &current)) {
        DropCorrupt(key);
        continue;
      }
      if (!ExpiryFromPttl(*(*replies)[1], now, &current.expires_at)) continue;  // expired
      update.record = std::move(current);
    }
    absl::StatusOr<bool> write = mutate(update.record);
    if (!write.ok()) return write.status();
    if (!*write) return update;
    update.written = true;
    if (!existed && !update.record.has_value()) return update;
    std::string new_value, ttl_ms = "0";
    const char* mode = "del";
    if (update.record.has_value() && update.record->expires_at > now) {
      StoredSession& r = *update.record;
      r.id = id;
      if (r.owner.size() > static_cast<size_t>(options_.max_owner_bytes)) {
        return absl::ResourceExhaustedError(absl::StrCat("session owner is ", r.owner.size(),
                                                         " bytes, over max_owner_bytes (",
                                                         options_.max_owner_bytes, ")"));
      }
      new_value = EncodeSessionValue(r);
      if (r.expires_at != absl::InfiniteFuture()) ttl_ms = TtlMs(r.expires_at, now);
      mode = "set";
    }
    absl::StatusOr<RedisReply> reply =
        client_->Run({"EVAL", kCompareAndSetScript, "1", key, existed ? "1" : "0", old_value, mode,
                      new_value, ttl_ms});
    if (!reply.ok()) return reply.status();
    if (IsRedisError(**reply, "OOM")) {
      return absl::ResourceExhaustedError("redis refused the session record: out of memory");
    }
    if ((*reply)->type == REDIS_REPLY_ERROR) return RedisErrorStatus("EVAL", **reply);
    if ((*reply)->type != REDIS_REPLY_INTEGER) {
      return absl::UnavailableError("redis EVAL: malformed reply");
    }
    if ((*reply)->integer == 1) return update;
    update_conflicts_.fetch_add(1);
  }
  return absl::AbortedError(absl::StrCat("session \"", id, "\": other writers changed the record ",
                                         options_.max_update_attempts,
                                         " times during this update; retry"));
}

absl::StatusOr<StoredSession> RedisSessionStore::Get(const std::string& id, absl::Time now) {
  const std::string key = SessionKey(id);
  const std::vector<RedisCommand> commands = {{"GET", key}, {"PTTL", key}};
  absl::StatusOr<std::vector<RedisReply>> replies = client_->Pipeline(commands);
  if (!replies.ok()) return replies.status();
  const redisReply& value = *(*replies)[0];
  if (value.type == REDIS_REPLY_ERROR) return RedisErrorStatus("GET", value);
  StoredSession session;
  session.id = id;
  if (value.type != REDIS_REPLY_NIL) {
    if (value.type != REDIS_REPLY_STRING ||
        !DecodeSessionValue(std::string_view(value.str, value.len), &session)) {
      DropCorrupt(key);
    } else if (ExpiryFromPttl(*(*replies)[1], now, &session.expires_at)) {
      return session;
    }
  }
  return absl::NotFoundError(absl::StrCat("session '", id, "' not found or expired"));
}

absl::Status RedisSessionStore::Delete(const std::string& id, absl::Time /*now*/) {
  absl::StatusOr<RedisReply> reply = client_->Run({"DEL", SessionKey(id)});
  if (!reply.ok()) return reply.status();
  if ((*reply)->type == REDIS_REPLY_ERROR) return RedisErrorStatus("DEL", **reply);
  if ((*reply)->type == REDIS_REPLY_INTEGER && (*reply)->integer > 0) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("session '", id, "' not found or expired"));
}

absl::StatusOr<std::vector<std::string>> RedisSessionStore::ScanIds() const {
  std::vector<std::string> ids;
  const std::string count = absl::StrCat(options_.scan_count);
  const std::string match = std::string(kKeyPrefix) + "*";
  std::string cursor = "0";
  do {
    absl::StatusOr<RedisReply> reply =
        client_->Run({"SCAN", cursor, "MATCH", match, "COUNT", count});
    if (!reply.ok()) return reply.status();
    const redisReply& r = **reply;
    if (r.type == REDIS_REPLY_ERROR) return RedisErrorStatus("SCAN", r);
    if (r.type != REDIS_REPLY_ARRAY || r.elements != 2 ||
        r.element[0]->type != REDIS_REPLY_STRING || r.element[1]->type != REDIS_REPLY_ARRAY) {
      return absl::UnavailableError("redis SCAN: malformed reply");
    }
    cursor.assign(r.element[0]->str, r.element[0]->len);
    const redisReply& keys = *r.element[1];
    for (size_t i = 0; i < keys.elements; ++i) {
      const redisReply& k = *keys.element[i];
      if (k.type != REDIS_REPLY_STRING || k.len < kKeyPrefix.size()) continue;
      ids.emplace_back(k.str + kKeyPrefix.size(), k.len - kKeyPrefix.size());
    }
  } while (cursor != "0");
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());  // SCAN may repeat keys
  return ids;
}

absl::StatusOr<SessionRecordStore::Page> RedisSessionStore::List(const BlockHash* partition,
                                                                 int32_t page_size,
                                                                 const std::string& page_token,
                                                                 absl::Time now) {
  if (page_size <= 0) page_size = kDefaultPageSize;
  page_size = std::min(page_size, kMaxPageSize);
  absl::StatusOr<std::vector<std::string>> ids = ScanIds();
  if (!ids.ok()) return ids.status();
  auto next =
      page_token.empty() ? ids->begin() : std::upper_bound(ids->begin(), ids->end(), page_token);
  const size_t meta_bytes = kSessionMetaFixedBytes + static_cast<size_t>(options_.max_owner_bytes);
  const std::string meta_end = absl::StrCat(meta_bytes - 1);
  Page page;
  while (next != ids->end() && static_cast<int32_t>(page.sessions.size()) < page_size) {
    // One round trip per batch: GETRANGE of the fields before the tokens, and PTTL.
    const auto batch_end = next + std::min<ptrdiff_t>(ids->end() - next, page_size);
    std::vector<std::string> keys;
    for (auto it = next; it != batch_end; ++it) keys.push_back(SessionKey(*it));
    std::vector<RedisCommand> commands;
    for (const std::string& key : keys) {
      commands.push_back({"GETRANGE", key, "0", meta_end});
      commands.push_back({"PTTL", key});
    }
    absl::StatusOr<std::vector<RedisReply>> replies = client_->Pipeline(commands);
    if (!replies.ok()) return replies.status();
    for (size_t i = 0; i < keys.size(); ++i, ++next) {
      if (static_cast<int32_t>(page.sessions.size()) == page_size) break;
      const redisReply& value = *(*replies)[2 * i];
      if (value.type == REDIS_REPLY_ERROR) return RedisErrorStatus("GETRANGE", value);
      if (value.type != REDIS_REPLY_STRING || value.len == 0) continue;  // expired meanwhile
      StoredSession session;
      session.id = *next;
      if (!DecodeSessionMeta(std::string_view(value.str, value.len), &session)) {
        // A value longer than the range may hold an owner written under a larger
        // max_owner_bytes: judge it whole before dropping it.
        if (value.len < meta_bytes) {
          DropCorrupt(keys[i]);
          continue;
        }
        absl::StatusOr<StoredSession> whole = Get(session.id, now);
        if (whole.status().code() == absl::StatusCode::kUnavailable) return whole.status();
        if (!whole.ok()) continue;
        session = *std::move(whole);
        session.tokens.clear();
        session.turn_ends.clear();
      }
      if (session.closed || (partition != nullptr && session.partition != *partition)) continue;
      if (!ExpiryFromPttl(*(*replies)[2 * i + 1], now, &session.expires_at)) continue;
      page.sessions.push_back(std::move(session));
    }
  }
  if (next != ids->end() && !page.sessions.empty()) page.next_page_token = page.sessions.back().id;
  return page;
}

int64_t RedisSessionStore::size() const {
  absl::StatusOr<std::vector<std::string>> ids = ScanIds();
  if (!ids.ok()) return 0;
  const std::string end = absl::StrCat(kClosedFlagOffset);
  int64_t live = 0;
  for (size_t at = 0; at < ids->size(); at += kMaxPageSize) {
    std::vector<std::string> keys;
    for (size_t i = at; i < std::min(ids->size(), at + kMaxPageSize); ++i) {
      keys.push_back(SessionKey((*ids)[i]));
    }
    std::vector<RedisCommand> commands;
    for (const std::string& key : keys) commands.push_back({"GETRANGE", key, "0", end});
    absl::StatusOr<std::vector<RedisReply>> replies = client_->Pipeline(commands);
    if (!replies.ok()) return 0;
    for (const RedisReply& r : *replies) {
      if (r->type != REDIS_REPLY_STRING || r->len == 0) continue;  // gone meanwhile
      const std::string_view v(r->str, r->len);
      const bool tombstone =
          v.starts_with("KVS3") && v.size() > kClosedFlagOffset && v[kClosedFlagOffset] == 1;
      if (!tombstone) ++live;
    }
  }
  return live;
}

}  // namespace kvserve::cachesvc
