// The engine's view of a session cache service (kvserve-cache): the few calls it makes
// to reuse KV computed by other replicas or earlier processes, and to share its own.
// The gRPC implementation is cachesvc::RemoteCacheClient; tests use in-process fakes.
//
// Nothing returned is trusted: the engine checks every record (cache/block_record.h)
// before a byte of it reaches the KV pool, and treats every error as a miss.
#ifndef KVSERVE_ENGINE_REMOTE_KV_CACHE_H_
#define KVSERVE_ENGINE_REMOTE_KV_CACHE_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache/block_hash.h"

namespace kvserve::engine {

// A session record (kvserve.v1.SessionRecord).
struct RemoteSession {
  std::string id;
  // The model's identity digest without a salt (RootBlockHash(identity, "")): only a
  // replica serving the same model and KV layout continues the session.
  cache::BlockHash partition;
  std::vector<int32_t> tokens;     // the whole history
  std::vector<int32_t> turn_ends;  // token offsets where turns ended
  bool has_head = false;
  cache::BlockHash head;  // hash of the last full block of `tokens`
  std::string owner;      // the replica that wrote it; informational
  std::string tenant;     // the tenant the session belongs to (empty: no authentication)
  absl::Duration ttl = absl::ZeroDuration();  // zero: the service's default
};

// Threading: every method is thread-safe and may block until `deadline`; the engine
// calls them from its remote-cache worker threads, never from the step thread.
class RemoteKvCache {
 public:
  virtual ~RemoteKvCache() = default;

  struct Presence {
    int32_t blocks = 0;  // leading blocks of the chain present
    int64_t bytes = 0;   // their records' bytes
  };
  // One round trip: how much of `chain` (in `partition`) the service holds.
  virtual absl::StatusOr<Presence> Lookup(const cache::BlockHash& partition,
                                          std::span<const cache::BlockHash> chain,
                                          absl::Time deadline) = 0;
  // Streams the records of `chain` in order: `on_record(index, record)` for each
  // complete record as it arrives; the record is the callee's to keep (move from) or
  // drop, so that a record reaches the caller without a copy. Stops at the first missing
  // block, or when on_record returns false. Returns the records on_record accepted.
  virtual absl::StatusOr<int32_t> Fetch(
      const cache::BlockHash& partition, std::span<const cache::BlockHash> chain,
      absl::Time deadline,
      const std::function<bool(int32_t index, std::string&& record)>& on_record) = 0;
  // Stores encoded records (cache::EncodeBlockRecord) of `partition`. Returns how many
  // the service accepted.
  virtual absl::StatusOr<int32_t> Store(const cache::BlockHash& partition,
                                        std::span<const std::string> records,
                                        absl::Time deadline) = 0;

  virtual absl::Status PutSession(const RemoteSession& session, absl::Time deadline) = 0;
  // NOT_FOUND when the service does not know the id.
  virtual absl::StatusOr<RemoteSession> GetSession(const std::string& id, absl::Time deadline) = 0;
  virtual absl::Status DeleteSession(const std::string& id, absl::Time deadline) = 0;
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_REMOTE_KV_CACHE_H_
