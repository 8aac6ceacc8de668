// The stores kvserve-cache serves from, chosen by its storage options: memory; memory over
// disk (blocks spill to disk and come back on reads; session records on disk too, in the
// folder's sessions/ subfolder, so both survive a restart); or Redis for blocks and
// session records.
#ifndef KVSERVE_CACHESVC_CACHE_SERVER_STORES_H_
#define KVSERVE_CACHESVC_CACHE_SERVER_STORES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cachesvc/block_store.h"

namespace kvserve::cachesvc {

struct CacheStorageOptions {
  // Memory tier: block record bytes held at most. Default 1 GiB.
  int64_t memory_bytes = int64_t{1} << 30;
  // Block record bytes one partition (model + cache salt) may hold; 0 = no quota.
  // Default 0.
  int64_t partition_quota_bytes = 0;
  // Disk tier folder; empty (the default) = memory only.
  std::string disk_dir;
  // Disk tier: block record bytes held at most; required (>= 1) with disk_dir.
  int64_t disk_bytes = 0;
  // Disk tier: fsync each block and session file (and its folder). Default false.
  bool disk_fsync = false;
  // Redis "HOST:PORT" holding blocks and session records instead of memory/disk;
  // empty (the default) = none. Excludes disk_dir.
  std::string redis;
  // Redis: bound on connecting and on each command's reads and writes. Default 200 ms.
  absl::Duration redis_timeout = absl::Milliseconds(200);
  // Redis: lifetime of a block key. Default none (Redis' maxmemory policy evicts).
  absl::Duration redis_block_ttl = absl::InfiniteDuration();
  // Session records held at most (memory and disk). Default 100,000.
  int64_t max_sessions = 100'000;
  // Bytes of a session owner name (Redis' session store). Default 256.
  int32_t max_owner_bytes = 256;
};

// Checks what the stores' own Create does not: INVALID_ARGUMENT naming the option by
// its flag's name ("redis and --disk-dir exclude each other", "disk-bytes must be >= 1
// with --disk-dir", "max-sessions must be >= 1", "partition-quota-bytes must be >= 0").
absl::Status ValidateCacheStorageOptions(const CacheStorageOptions& options);

struct CacheStores {
  std::unique_ptr<BlockStore> blocks;
  std::unique_ptr<SessionRecordStore> sessions;
  // What start-up found: for disk session records "N session records in DIR" and the
  // files dropped by reason (a degraded disk shows here); empty otherwise.
  std::string restored;
};

// Opens the stores `options` name (ValidateCacheStorageOptions first); disk session
// records are read as of `now`. The stores' Create errors (INVALID_ARGUMENT naming the
// option; "disk-dir: ..." for the session records); UNAVAILABLE when Redis cannot be
// reached.
absl::StatusOr<CacheStores> OpenCacheStores(const CacheStorageOptions& options, absl::Time now);

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_CACHE_SERVER_STORES_H_
