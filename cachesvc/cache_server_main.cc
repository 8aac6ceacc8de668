// kvserve-cache: the session cache service (kvserve.v1.SessionCache). Maps flags onto
// CacheServerOptions and the stores, starts the server, prints
// "kvserve-cache listening on HOST:PORT", and on SIGTERM or SIGINT stops: readiness goes
// NOT_SERVING, calls in flight get --drain-grace, then the process exits 0.

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cachesvc/cache_server.h"
#include "cachesvc/disk_block_store.h"
#include "cachesvc/disk_session_store.h"
#include "cachesvc/memory_block_store.h"
#include "cachesvc/memory_session_store.h"
#include "cachesvc/redis_block_store.h"
#include "cachesvc/redis_client.h"
#include "cachesvc/redis_session_store.h"
#include "cachesvc/tiered_block_store.h"
#include "common/build_version.h"
#include "common/clock.h"
#include "common/flags.h"
#include "server/bearer_auth.h"
#include "server/host_port.h"
#include "server/shutdown_signals.h"
#include "server/tls_credentials.h"
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
ABSL_FLAG(std::string, auth_tokens, "",
          "File of \"TOKEN NAME\" lines ('#' comments); when set, every call but health "
          "needs \"authorization: Bearer TOKEN\" with a listed token.");
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
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "kvserve-cache: %s\n", std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::StatusOr<CacheServerOptions> OptionsFromFlags() {
  CacheServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.metrics.address = absl::GetFlag(FLAGS_metrics_listen);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_threads = absl::GetFlag(FLAGS_max_threads);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      server::ServerCredentialsFromFlags();
  if (!credentials.ok()) return credentials.status();
  options.credentials = *std::move(credentials);
  if (absl::Status s = server::ApplyMetricsTlsFlags(options.metrics); !s.ok()) return s;
  SessionCacheService::Options& s = options.service;
  s.max_chain_blocks = absl::GetFlag(FLAGS_max_chain_blocks);
  s.max_record_bytes = absl::GetFlag(FLAGS_max_record_bytes);
  s.default_session_ttl = absl::GetFlag(FLAGS_session_ttl);
  s.max_session_ttl = absl::GetFlag(FLAGS_max_session_ttl);
  s.max_session_lease = absl::GetFlag(FLAGS_max_session_lease);
  s.session_tombstone_ttl = absl::GetFlag(FLAGS_session_tombstone_ttl);
  s.max_session_tokens = absl::GetFlag(FLAGS_max_session_tokens);
  s.max_session_id_bytes = absl::GetFlag(FLAGS_max_session_id_bytes);
  s.injected_delay = absl::GetFlag(FLAGS_inject_delay);
  if (s.injected_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--inject-delay must be >= 0");
  }
  if (s.injected_delay > absl::ZeroDuration()) {
    std::printf("kvserve-cache: FAULT INJECTION: every call is delayed by %s (--inject-delay)\n",
                absl::FormatDuration(s.injected_delay).c_str());
  }
  if (const std::string path = absl::GetFlag(FLAGS_auth_tokens); !path.empty()) {
    absl::StatusOr<server::BearerAuth> auth = server::BearerAuth::FromFile(path);
    if (!auth.ok()) return absl::InvalidArgumentError(auth.status().message());
    options.auth = *std::move(auth);
  }
  return options;
}

struct Stores {
  std::unique_ptr<BlockStore> blocks;
  std::unique_ptr<SessionRecordStore> sessions;
};

absl::Status Flagged(const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("--", status.message()));
}

// Memory; memory over disk (--disk-dir, sessions on disk too); or Redis (--redis) for
// blocks and sessions.
absl::StatusOr<Stores> StoresFromFlags() {
  const std::string disk_dir = absl::GetFlag(FLAGS_disk_dir);
  const std::string redis = absl::GetFlag(FLAGS_redis);
  const int64_t quota = absl::GetFlag(FLAGS_partition_quota_bytes);
  if (quota < 0) return absl::InvalidArgumentError("--partition-quota-bytes must be >= 0");
  Stores stores;
  if (!redis.empty()) {
    if (!disk_dir.empty()) {
      return absl::InvalidArgumentError("--redis and --disk-dir exclude each other");
    }
    RedisOptions options;
    if (absl::Status s = ParseRedisAddress(redis, &options); !s.ok()) return Flagged(s);
    options.timeout = absl::GetFlag(FLAGS_redis_timeout);
    absl::StatusOr<std::unique_ptr<RedisClient>> client = RedisClient::Create(options);
    if (!client.ok()) return Flagged(client.status());
    std::shared_ptr<RedisClient> shared = *std::move(client);
    absl::StatusOr<std::unique_ptr<RedisBlockStore>> blocks =
        RedisBlockStore::Create(shared, {.block_ttl = absl::GetFlag(FLAGS_redis_block_ttl)});
    if (!blocks.ok()) return Flagged(blocks.status());
    RedisSessionStore::Options session_options;
    session_options.max_owner_bytes = absl::GetFlag(FLAGS_max_session_id_bytes);
    absl::StatusOr<std::unique_ptr<RedisSessionStore>> sessions =
        RedisSessionStore::Create(shared, session_options);
    if (!sessions.ok()) return Flagged(sessions.status());
    stores.blocks = *std::move(blocks);
    stores.sessions = *std::move(sessions);
    return stores;
  }
  absl::StatusOr<std::unique_ptr<MemoryBlockStore>> memory = MemoryBlockStore::Create(
      {.capacity_bytes = absl::GetFlag(FLAGS_memory_bytes), .partition_quota_bytes = quota});
  if (!memory.ok()) return Flagged(memory.status());
  stores.blocks = *std::move(memory);
  if (!disk_dir.empty()) {
    if (absl::GetFlag(FLAGS_disk_bytes) < 1) {
      return absl::InvalidArgumentError("--disk-bytes must be >= 1 with --disk-dir");
    }
    DiskBlockStore::Options options;
    options.dir = disk_dir;
    options.index.capacity_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_disk_bytes));
    options.index.partition_quota_bytes = static_cast<uint64_t>(quota);
    options.fsync = absl::GetFlag(FLAGS_disk_fsync);
    absl::StatusOr<std::unique_ptr<DiskBlockStore>> disk = DiskBlockStore::Create(options);
    if (!disk.ok()) return Flagged(disk.status());
    stores.blocks = std::make_unique<TieredBlockStore>(std::move(stores.blocks), *std::move(disk));
  }
  if (absl::GetFlag(FLAGS_max_sessions) < 1) {
    return absl::InvalidArgumentError("--max-sessions must be >= 1");
  }
  if (disk_dir.empty()) {
    stores.sessions = std::make_unique<MemorySessionStore>(
        MemorySessionStore::Options{.max_records = absl::GetFlag(FLAGS_max_sessions)});
    return stores;
  }
  DiskSessionStore::Options options;
  options.dir = disk_dir + "/sessions";
  options.max_records = absl::GetFlag(FLAGS_max_sessions);
  options.fsync = absl::GetFlag(FLAGS_disk_fsync);
  absl::StatusOr<std::unique_ptr<DiskSessionStore>> sessions =
      DiskSessionStore::Create(options, common::Clock::Real()->Now());
  if (!sessions.ok()) {
    return absl::Status(sessions.status().code(),
                        absl::StrCat("--disk-dir: ", sessions.status().message()));
  }
  // Records found on disk and files dropped at start-up (a degraded disk shows here).
  std::printf("kvserve-cache: %lld session records in %s",
              static_cast<long long>((*sessions)->size()), options.dir.c_str());
  for (const auto& [reason, n] : (*sessions)->drops()) {
    std::printf(", %s %lld", reason.c_str(), static_cast<long long>(n));
  }
  std::printf("\n");
  stores.sessions = *std::move(sessions);
  return stores;
}

int Run() {
  absl::StatusOr<CacheServerOptions> options = OptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  if (absl::GetFlag(FLAGS_drain_grace) < absl::ZeroDuration()) {
    return Fail(absl::InvalidArgumentError("--drain-grace must be >= 0"));
  }
  absl::StatusOr<Stores> stores = StoresFromFlags();
  if (!stores.ok()) return Fail(stores.status());

  absl::StatusOr<server::ShutdownSignals> signals = server::ShutdownSignals::Install();
  if (!signals.ok()) return Fail(signals.status());
  const std::string listen = options->listen_address;
  absl::StatusOr<std::unique_ptr<CacheServer>> server =
      CacheServer::Start(*std::move(options), std::move(stores->blocks),
                         std::move(stores->sessions), common::Clock::Real());
  if (!server.ok()) {
    const absl::Status& s = server.status();
    return Fail(s.code() == absl::StatusCode::kInvalidArgument
                    ? absl::InvalidArgumentError(absl::StrCat("--", s.message()))
                    : s);
  }
  absl::StatusOr<server::HostPort> hp = server::ParseHostPort(listen, "listen");
  const std::string host =
      hp->host.find(':') == std::string::npos ? hp->host : absl::StrCat("[", hp->host, "]");
  std::printf("kvserve-cache listening on %s:%d (backend %s", host.c_str(), (*server)->port(),
              (*server)->blocks().name().c_str());
  if ((*server)->metrics_port() != 0) std::printf(", metrics port %d", (*server)->metrics_port());
  std::printf(")\n");
  std::fflush(stdout);

  const int signal_number = signals->Wait();
  std::printf("kvserve-cache: signal %d, stopping (grace %s)\n", signal_number,
              absl::FormatDuration(absl::GetFlag(FLAGS_drain_grace)).c_str());
  std::fflush(stdout);
  (*server)->Shutdown(absl::GetFlag(FLAGS_drain_grace));
  std::printf("kvserve-cache: stopped\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace kvserve::cachesvc

int main(int argc, char** argv) {
  const std::vector<std::string> args = kvserve::common::ParseFlags(
      argc, argv,
      "The session cache service (kvserve.v1.SessionCache): KV blocks and session records "
      "shared by kvserve replicas, with health, reflection and Prometheus metrics.\n"
      "Usage: kvserve-cache [--listen 127.0.0.1:50061] [--memory-bytes N] "
      "[--auth-tokens FILE] [--metrics-listen HOST:PORT] [--tls-cert FILE --tls-key FILE "
      "[--tls-client-ca FILE]] [flags]\n"
      "Flags accept - or _ (--memory-bytes or --memory_bytes). SIGTERM stops and exits 0.",
      "cache_server_main.cc", {}, [] {
        return absl::StrCat("kvserve-cache ", kvserve::common::kVersion,
                            "\ncommit: ", kvserve::common::kGitCommit,
                            "\nbackend: none (stores KV blocks and sessions; runs no model, no "
                            "BLAS)\n");
      });
  if (args.size() > 1) {
    std::fprintf(stderr, "kvserve-cache: unexpected argument \"%s\" (see --help)\n",
                 args[1].c_str());
    return 2;
  }
  return kvserve::cachesvc::Run();
}
