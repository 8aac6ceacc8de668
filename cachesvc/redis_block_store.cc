#include "cachesvc/redis_block_store.h"

#include <charconv>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvserve::cachesvc {
namespace {

// The integer after "name:" on a line of an INFO reply (0 when absent or malformed).
int64_t InfoField(std::string_view info, std::string_view name) {
  std::string key(1, '\n');
  key.append(name);
  key.push_back(':');
  const size_t at = info.find(key);
  if (at == std::string_view::npos) return 0;
  std::string_view rest = info.substr(at + key.size());
  int64_t value = 0;
  std::from_chars(rest.data(), rest.data() + rest.size(), value);
  return value;
}

}  // namespace

std::string RedisBlockKey(const BlockHash& partition, const BlockHash& key) {
  return absl::StrCat("kvb:", HashHex(partition), ":", HashHex(key));
}

absl::StatusOr<std::unique_ptr<RedisBlockStore>> RedisBlockStore::Create(
    std::shared_ptr<RedisClient> client, const Options& options) {
  if (client == nullptr) return absl::InvalidArgumentError("redis block store: no client");
  if (options.block_ttl != absl::InfiniteDuration() && options.block_ttl < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError("redis block store: block_ttl must be at least 1 ms");
  }
  return std::unique_ptr<RedisBlockStore>(new RedisBlockStore(std::move(client), options));
}

absl::StatusOr<LookupResult> RedisBlockStore::Lookup(const BlockHash& partition,
                                                     std::span<const BlockHash> chain,
                                                     absl::Time /*now*/) {
  LookupResult result;
  if (chain.empty()) return result;
  std::vector<std::string> keys;
  keys.reserve(chain.size());
  std::vector<RedisCommand> commands;
  commands.reserve(chain.size());
  for (const BlockHash& key : chain) keys.push_back(RedisBlockKey(partition, key));
  for (const std::string& key : keys) commands.push_back({"STRLEN", key});
  absl::StatusOr<std::vector<RedisReply>> replies = client_->Pipeline(commands);
  if (!replies.ok()) return replies.status();
  for (const RedisReply& reply : *replies) {
    if (reply->type == REDIS_REPLY_ERROR) return RedisErrorStatus("STRLEN", *reply);
    if (reply->type != REDIS_REPLY_INTEGER || reply->integer <= 0) break;
    ++result.present_blocks;
    result.present_bytes += reply->integer;
  }
  return result;
}

absl::StatusOr<RecordPtr> RedisBlockStore::Get(const BlockKey& block, absl::Time /*now*/) {
  const auto& [partition, key] = block;
  const std::string redis_key = RedisBlockKey(partition, key);
  absl::StatusOr<RedisReply> reply = client_->Run({"GET", redis_key});
  if (!reply.ok()) return reply.status();
  const redisReply& r = **reply;
  if (r.type == REDIS_REPLY_NIL) return RecordPtr();
  if (r.type == REDIS_REPLY_ERROR) return RedisErrorStatus("GET", r);
  cache::RecordCheck check = cache::RecordCheck::kBadFormat;  // a non-string value
  if (r.type == REDIS_REPLY_STRING) {
    const std::string_view value(r.str, r.len);
    check = CheckStoredRecord(AsBytes(value), partition, key);
    if (check == cache::RecordCheck::kOk) return std::make_shared<const std::string>(value);
  }
  drops_.Add(CorruptReason(check));
  Erase(block);
  return RecordPtr();
}

absl::StatusOr<PutOutcome> RedisBlockStore::Put(const BlockKey& block, const BlockHash& /*parent*/,
                                                RecordPtr record, absl::Time /*now*/) {
  const std::string redis_key = RedisBlockKey(block.partition, block.key);
  RedisCommand command = {"SET", redis_key, *record, "NX"};
  std::string ttl_ms;
  if (options_.block_ttl != absl::InfiniteDuration()) {
    ttl_ms = absl::StrCat(absl::ToInt64Milliseconds(options_.block_ttl));
    command.push_back("PX");
    command.push_back(ttl_ms);
  }
  absl::StatusOr<RedisReply> reply = client_->Run(command);
  if (!reply.ok()) return reply.status();
  const redisReply& r = **reply;
  if (r.type == REDIS_REPLY_NIL) return PutOutcome::kAlreadyPresent;
  if (IsRedisError(r, "OOM")) {
    drops_.Add("redis_oom");
    return PutOutcome::kNoRoom;
  }
  if (r.type == REDIS_REPLY_ERROR) return RedisErrorStatus("SET", r);
  return PutOutcome::kStored;
}

void RedisBlockStore::Erase(const BlockKey& block) {
  const std::string redis_key = RedisBlockKey(block.partition, block.key);
  (void)client_->Run({"DEL", redis_key});
}

std::vector<std::string> RedisBlockStore::DropReasons() {
  std::vector<std::string> reasons = CorruptReasons();
  reasons.push_back("redis_oom");
  return reasons;
}

BlockStoreStats RedisBlockStore::stats() const {
  BlockStoreStats stats;
  const std::vector<RedisCommand> commands = {{"DBSIZE"}, {"INFO"}};
  absl::StatusOr<std::vector<RedisReply>> replies = client_->Pipeline(commands);
  int64_t redis_evicted = 0;
  if (replies.ok() && (*replies)[0]->type == REDIS_REPLY_INTEGER &&
      (*replies)[1]->type == REDIS_REPLY_STRING) {
    stats.blocks = (*replies)[0]->integer;
    const std::string_view info((*replies)[1]->str, (*replies)[1]->len);
    stats.bytes = InfoField(info, "used_memory");
    stats.capacity_bytes = InfoField(info, "maxmemory");
    redis_evicted = InfoField(info, "evicted_keys");
  }
  stats.evictions = drops_.Snapshot();
  stats.evictions.emplace_back("redis_evicted", redis_evicted);
  return stats;
}

}  // namespace kvserve::cachesvc
