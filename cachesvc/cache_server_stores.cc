#include "cachesvc/cache_server_stores.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cachesvc/disk_block_store.h"
#include "cachesvc/disk_session_store.h"
#include "cachesvc/memory_block_store.h"
#include "cachesvc/memory_session_store.h"
#include "cachesvc/redis_block_store.h"
#include "cachesvc/redis_client.h"
#include "cachesvc/redis_session_store.h"
#include "cachesvc/tiered_block_store.h"

namespace kvserve::cachesvc {
namespace {

absl::StatusOr<CacheStores> OpenRedis(const CacheStorageOptions& options) {
  RedisOptions redis;
  if (absl::Status s = ParseRedisAddress(options.redis, &redis); !s.ok()) return s;
  redis.timeout = options.redis_timeout;
  absl::StatusOr<std::unique_ptr<RedisClient>> client = RedisClient::Create(redis);
  if (!client.ok()) return client.status();
  std::shared_ptr<RedisClient> shared = *std::move(client);
  absl::StatusOr<std::unique_ptr<RedisBlockStore>> blocks =
      RedisBlockStore::Create(shared, {.block_ttl = options.redis_block_ttl});
  if (!blocks.ok()) return blocks.status();
  RedisSessionStore::Options session_options;
  session_options.max_owner_bytes = options.max_owner_bytes;
  absl::StatusOr<std::unique_ptr<RedisSessionStore>> sessions =
      RedisSessionStore::Create(shared, session_options);
  if (!sessions.ok()) return sessions.status();
  CacheStores stores;
  stores.blocks = *std::move(blocks);
  stores.sessions = *std::move(sessions);
  return stores;
}

// Session records in DIR/sessions, restored as of `now`; `restored` says what was found.
absl::StatusOr<std::unique_ptr<DiskSessionStore>> OpenDiskSessions(
    const CacheStorageOptions& options, absl::Time now, std::string& restored) {
  DiskSessionStore::Options disk;
  disk.dir = options.disk_dir + "/sessions";
  disk.max_records = options.max_sessions;
  disk.fsync = options.disk_fsync;
  absl::StatusOr<std::unique_ptr<DiskSessionStore>> sessions = DiskSessionStore::Create(disk, now);
  if (!sessions.ok()) {
    return absl::Status(sessions.status().code(),
                        absl::StrCat("disk-dir: ", sessions.status().message()));
  }
  restored = absl::StrCat((*sessions)->size(), " session records in ", disk.dir);
  for (const auto& [reason, n] : (*sessions)->drops()) {
    absl::StrAppend(&restored, ", ", reason, " ", n);
  }
  return sessions;
}

}  // namespace

absl::Status ValidateCacheStorageOptions(const CacheStorageOptions& options) {
  if (options.partition_quota_bytes < 0) {
    return absl::InvalidArgumentError("partition-quota-bytes must be >= 0");
  }
  if (!options.redis.empty() && !options.disk_dir.empty()) {
    return absl::InvalidArgumentError("redis and --disk-dir exclude each other");
  }
  if (!options.disk_dir.empty() && options.disk_bytes < 1) {
    return absl::InvalidArgumentError("disk-bytes must be >= 1 with --disk-dir");
  }
  if (options.redis.empty() && options.max_sessions < 1) {
    return absl::InvalidArgumentError("max-sessions must be >= 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<CacheStores> OpenCacheStores(const CacheStorageOptions& options, absl::Time now) {
  if (absl::Status s = ValidateCacheStorageOptions(options); !s.ok()) return s;
  if (!options.redis.empty()) return OpenRedis(options);
  CacheStores stores;
  absl::StatusOr<std::unique_ptr<MemoryBlockStore>> memory =
      MemoryBlockStore::Create({.capacity_bytes = options.memory_bytes,
                                .partition_quota_bytes = options.partition_quota_bytes});
  if (!memory.ok()) return memory.status();
  stores.blocks = *std::move(memory);
  if (options.disk_dir.empty()) {
    stores.sessions = std::make_unique<MemorySessionStore>(
        MemorySessionStore::Options{.max_records = options.max_sessions});
    return stores;
  }
  DiskBlockStore::Options disk;
  disk.dir = options.disk_dir;
  disk.index.capacity_bytes = static_cast<uint64_t>(options.disk_bytes);
  disk.index.partition_quota_bytes = static_cast<uint64_t>(options.partition_quota_bytes);
  disk.fsync = options.disk_fsync;
  absl::StatusOr<std::unique_ptr<DiskBlockStore>> disk_store = DiskBlockStore::Create(disk);
  if (!disk_store.ok()) return disk_store.status();
  stores.blocks =
      std::make_unique<TieredBlockStore>(std::move(stores.blocks), *std::move(disk_store));
  absl::StatusOr<std::unique_ptr<DiskSessionStore>> sessions =
      OpenDiskSessions(options, now, stores.restored);
  if (!sessions.ok()) return sessions.status();
  stores.sessions = *std::move(sessions);
  return stores;
}

}  // namespace kvserve::cachesvc
