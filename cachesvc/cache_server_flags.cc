#include "cachesvc/cache_server_flags.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "server/auth_flags.h"
#include "server/tls_flags.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50061",
          "gRPC listen address HOST:PORT (port 0 = any free port, printed at start).");
ABSL_FLAG(std::string, metrics_listen, "",
          "Prometheus /metrics listen address HOST:PORT; empty (default) = none.");
ABSL_FLAG(int64_t, memory_bytes, int64_t{1} << 30,
          "Memory tier: block record bytes held at most (default 1 GiB).");
ABSL_FLAG(int64_t, partition_quota_bytes, 0,
          "Block record bytes one partition (model + cache salt) may hold; 0 = no quota.");
ABSL_FLAG(std::string, disk_dir, "",
          "Disk tier folder (blocks spill from memory to disk and come back on reads; "
          "session records are kept in its sessions/ subfolder, so both survive a "
          "restart); empty = memory only.");
ABSL_FLAG(int64_t, disk_bytes, 0, "Disk tier: block record bytes held at most (required).");
ABSL_FLAG(bool, disk_fsync, false,
          "Disk tier: fsync each block and session file (and its folder).");
ABSL_FLAG(std::string, redis, "",
          "Redis HOST:PORT holding blocks and session records instead of memory/disk; "
          "empty = none.");
ABSL_FLAG(absl::Duration, redis_timeout, absl::Milliseconds(200),
          "Redis: bound on connecting and on each command's reads and writes.");
ABSL_FLAG(absl::Duration, redis_block_ttl, absl::InfiniteDuration(),
          "Redis: lifetime of a block key (default none: Redis' maxmemory policy evicts).");
ABSL_FLAG(int32_t, max_chain_blocks, 65536, "Hashes one Lookup/FetchBlocks may name.");
ABSL_FLAG(int64_t, max_record_bytes, int64_t{64} << 20,
          "Largest block record StoreBlocks accepts (default 64 MiB).");
ABSL_FLAG(absl::Duration, session_ttl, absl::Hours(1),
          "Session record lifetime when PutSession leaves ttl_seconds at 0.");
ABSL_FLAG(absl::Duration, max_session_ttl, absl::Hours(24), "Largest accepted session TTL.");
ABSL_FLAG(absl::Duration, max_session_lease, absl::Minutes(10),
          "Longest session lease a turn takes (GetSession lease_ms is cut to it).");
ABSL_FLAG(absl::Duration, session_tombstone_ttl, absl::Hours(24),
          "How long a closed session's tombstone is kept; must be at least every "
          "replica's --max-session-ttl (kvserve's default 24h).");
ABSL_FLAG(int32_t, max_session_tokens, 1 << 20, "Tokens one session record may hold.");
ABSL_FLAG(int32_t, max_session_id_bytes, 256, "Bytes of a session id or owner name.");
ABSL_FLAG(int64_t, max_sessions, 100'000, "Session records held at most.");
ABSL_FLAG(int32_t, max_message_bytes, 8 << 20,
          "Largest gRPC message received or sent (default 8 MiB; must exceed 4 MiB + 64 KiB).");
ABSL_FLAG(int32_t, max_threads, 64, "Threads handling calls at most (calls beyond wait).");
ABSL_FLAG(absl::Duration, inject_delay, absl::ZeroDuration(),
          "Fault injection for tests: every call waits this long before it is handled. "
          "0 = off.");
ABSL_FLAG(absl::Duration, drain_grace, absl::Seconds(10),
          "On SIGTERM/SIGINT: how long calls in flight may run before they are cancelled.");

namespace kvserve::cachesvc {

absl::StatusOr<CacheProcessOptions> CacheProcessOptionsFromFlags() {
  CacheProcessOptions options;
  CacheServerOptions& o = options.server;
  o.listen_address = absl::GetFlag(FLAGS_listen);
  o.metrics.address = absl::GetFlag(FLAGS_metrics_listen);
  o.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  o.max_threads = absl::GetFlag(FLAGS_max_threads);
  o.drain_grace = absl::GetFlag(FLAGS_drain_grace);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      server::ServerCredentialsFromFlags();
  if (!credentials.ok()) return credentials.status();
  o.credentials = *std::move(credentials);
  if (absl::Status s = server::ApplyMetricsTlsFlags(o.metrics); !s.ok()) return s;
  absl::StatusOr<std::optional<server::BearerAuth>> auth = server::BearerAuthFromFlag();
  if (!auth.ok()) return auth.status();
  o.auth = *std::move(auth);
  SessionCacheService::Options& s = o.service;
  s.max_chain_blocks = absl::GetFlag(FLAGS_max_chain_blocks);
  s.max_record_bytes = absl::GetFlag(FLAGS_max_record_bytes);
  s.default_session_ttl = absl::GetFlag(FLAGS_session_ttl);
  s.max_session_ttl = absl::GetFlag(FLAGS_max_session_ttl);
  s.max_session_lease = absl::GetFlag(FLAGS_max_session_lease);
  s.session_tombstone_ttl = absl::GetFlag(FLAGS_session_tombstone_ttl);
  s.max_session_tokens = absl::GetFlag(FLAGS_max_session_tokens);
  s.max_session_id_bytes = absl::GetFlag(FLAGS_max_session_id_bytes);
  s.injected_delay = absl::GetFlag(FLAGS_inject_delay);
  CacheStorageOptions& st = options.storage;
  st.memory_bytes = absl::GetFlag(FLAGS_memory_bytes);
  st.partition_quota_bytes = absl::GetFlag(FLAGS_partition_quota_bytes);
  st.disk_dir = absl::GetFlag(FLAGS_disk_dir);
  st.disk_bytes = absl::GetFlag(FLAGS_disk_bytes);
  st.disk_fsync = absl::GetFlag(FLAGS_disk_fsync);
  st.redis = absl::GetFlag(FLAGS_redis);
  st.redis_timeout = absl::GetFlag(FLAGS_redis_timeout);
  st.redis_block_ttl = absl::GetFlag(FLAGS_redis_block_ttl);
  st.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  st.max_owner_bytes = absl::GetFlag(FLAGS_max_session_id_bytes);
  return options;
}

}  // namespace kvserve::cachesvc
