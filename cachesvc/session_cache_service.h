// kvserve.v1.SessionCache (proto/kvserve/v1/session_cache.proto) over a BlockStore and
// a SessionIndex (the session records and their eviction hints). Each method:
// authenticate → validate → call the stores → convert the status once → record metrics
// (all in Handle()).
//
// Session semantics (versions, leases, tombstones: session_cache.proto, "Sessions")
// live here and only here, each session RPC one SessionMutation run by the index's
// atomic per-record update (SessionRecordStore::Update), so every store (memory, disk,
// Redis) behaves alike. All time is the injected clock's: lease deadlines and
// expiries are absolute times of that clock.
//
// gRPC's synchronous API: handlers run on the server's thread pool, bounded by the
// ResourceQuota CacheServer sets. FetchBlocks is served as a split stream of raw
// messages (grpc::ByteBuffer): each response is encoded by hand in session_cache.proto's
// wire format, its chunks' data as slices that share the stored records, so no record
// byte is copied in user space on the way out (the kernel's socket copy is the only one). The
// stores may block (disk reads, Redis round trips), which the callback API's reactors must never
// do; a blocking handler here just holds one pool thread, and the stream calls use blocking
// Read/Write with at most one message in flight, which is gRPC's flow control for free.
//
// Threading: all methods are called concurrently by gRPC; the service holds only
// immutable options and thread-safe collaborators.
#ifndef KVSERVE_CACHESVC_SESSION_CACHE_SERVICE_H_
#define KVSERVE_CACHESVC_SESSION_CACHE_SERVICE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cachesvc/block_store.h"
#include "cachesvc/cache_metrics.h"
#include "cachesvc/session_index.h"
#include "common/clock.h"
#include "grpcpp/grpcpp.h"
#include "kvserve/v1/session_cache.grpc.pb.h"
#include "server/bearer_auth.h"

namespace kvserve::cachesvc {

class SessionCacheService final : public kvserve::v1::SessionCache::Service {
 public:
  // Every limit of the service, with its default (the kvserve-cache flag of each in
  // brackets).
  struct Options {
    // Hashes one Lookup or FetchBlocks may name; more: INVALID_ARGUMENT. Default 65536
    // [--max-chain-blocks].
    int32_t max_chain_blocks = 65536;
    // Largest block record StoreBlocks accepts; larger: RESOURCE_EXHAUSTED. Default
    // 64 MiB [--max-record-bytes].
    int64_t max_record_bytes = int64_t{64} << 20;
    // FetchBlocks chunk size when the request leaves max_chunk_bytes at 0 (1 MiB), and
    // the range requests are clamped to ([64 KiB, 4 MiB]).
    int32_t default_chunk_bytes = 1 << 20;
    int32_t min_chunk_bytes = 64 << 10;
    int32_t max_chunk_bytes = 4 << 20;
    // Session TTL when PutSession leaves ttl_seconds at 0 (default 1 h
    // [--session-ttl]); the largest accepted (default 24 h [--max-session-ttl]).
    absl::Duration default_session_ttl = absl::Hours(1);
    absl::Duration max_session_ttl = absl::Hours(24);
    // Tokens one session record may hold; more: RESOURCE_EXHAUSTED. Default 1,048,576
    // [--max-session-tokens].
    int32_t max_session_tokens = 1 << 20;
    // Bytes of a session id, owner or tenant name; more: INVALID_ARGUMENT. Default 256
    // [--max-session-id-bytes].
    int32_t max_session_id_bytes = 256;
    // Longest lease GetSession takes or renews; a longer lease_ms is cut to it. Default
    // 10 min [--max-session-lease].
    absl::Duration max_session_lease = absl::Minutes(10);
    // How long DeleteSession's tombstone is kept. Must be at least every replica's
    // session lifetime (kvserve --max-session-ttl, default 24 h), so that a replica
    // holding a copy of a closed session still finds the tombstone. Default 24 h
    // [--session-tombstone-ttl].
    absl::Duration session_tombstone_ttl = absl::Hours(24);
    // Fault injection for tests of the replicas' degraded paths: every call waits this
    // long (real time, on its handler thread) before it is handled. Default 0 (off)
    // [--inject-delay]; kvserve-cache logs it at start when set.
    absl::Duration injected_delay = absl::ZeroDuration();
  };

  // Borrows everything; all must outlive the service. `auth` null = no authentication.
  SessionCacheService(const Options& options, BlockStore* blocks, SessionIndex* sessions,
                      CacheMetrics* metrics, const common::Clock* clock,
                      const server::BearerAuth* auth);

  grpc::Status Lookup(grpc::ServerContext* context, const v1::LookupRequest* request,
                      v1::LookupResponse* response) override;
  // FetchBlocks (replaces the generated handler; see the file comment).
  grpc::Status StreamedFetchBlocks(
      grpc::ServerContext* context,
      grpc::ServerSplitStreamer<v1::FetchBlocksRequest, grpc::ByteBuffer>* stream);
  grpc::Status StoreBlocks(grpc::ServerContext* context,
                           grpc::ServerReader<v1::StoreBlocksRequest>* reader,
                           v1::StoreBlocksResponse* response) override;
  grpc::Status PutSession(grpc::ServerContext* context, const v1::PutSessionRequest* request,
                          v1::PutSessionResponse* response) override;
  grpc::Status GetSession(grpc::ServerContext* context, const v1::GetSessionRecordRequest* request,
                          v1::SessionRecord* response) override;
  grpc::Status ReleaseSessionLease(grpc::ServerContext* context,
                                   const v1::ReleaseSessionLeaseRequest* request,
                                   v1::ReleaseSessionLeaseResponse* response) override;
  grpc::Status DeleteSession(grpc::ServerContext* context, const v1::DeleteSessionRequest* request,
                             v1::DeleteSessionResponse* response) override;
  grpc::Status ListSessions(grpc::ServerContext* context, const v1::ListSessionsRequest* request,
                            v1::ListSessionsResponse* response) override;
  grpc::Status GetStats(grpc::ServerContext* context, const v1::GetStatsRequest* request,
                        v1::CacheStats* response) override;

 private:
  // Authenticates, runs `body`, converts its status and records the call's metrics.
  grpc::Status Handle(const char* method, grpc::ServerContext* context,
                      const std::function<absl::Status()>& body);

  absl::Status DoLookup(const v1::LookupRequest& request, v1::LookupResponse* response);
  absl::Status DoFetch(grpc::ServerContext* context,
                       grpc::ServerSplitStreamer<v1::FetchBlocksRequest, grpc::ByteBuffer>* stream);
  absl::Status DoStore(grpc::ServerReader<v1::StoreBlocksRequest>* reader,
                       v1::StoreBlocksResponse* response);
  // Checks and stores one complete record; counts it in `response`.
  absl::Status StoreRecord(const BlockHash& partition, std::string record,
                           v1::StoreBlocksResponse* response);
  absl::Status DoPutSession(const v1::PutSessionRequest& request, v1::PutSessionResponse* response);
  // INVALID_ARGUMENT unless `value` (field `field`) has 1 to max_session_id_bytes bytes
  // (0 allowed when `may_be_empty`).
  absl::Status CheckName(const std::string& field, const std::string& value,
                         bool may_be_empty) const;
  absl::Status DoReleaseLease(const v1::ReleaseSessionLeaseRequest& request);
  absl::Status DoGetSession(const v1::GetSessionRecordRequest& request,
                            v1::SessionRecord* response);
  absl::Status DoDeleteSession(const v1::DeleteSessionRequest& request);
  absl::Status DoListSessions(const v1::ListSessionsRequest& request,
                              v1::ListSessionsResponse* response);
  void DoGetStats(v1::CacheStats* response);

  const Options options_;
  BlockStore* const blocks_;
  SessionIndex* const sessions_;
  CacheMetrics* const metrics_;
  const common::Clock* const clock_;
  const server::BearerAuth* const auth_;
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_SESSION_CACHE_SERVICE_H_
