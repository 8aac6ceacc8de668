// Session records in Redis: one key "kvs:<id>" per session, holding the compact binary
// encoding of cachesvc/session_encoding.h, with the record's lifetime as the key's Redis
// TTL (SET ... PX), so Redis expires sessions by itself and every kvserve-cache replica
// sees the same ones.
//
// List reads only the first kSessionMetaFixedBytes + max_owner_bytes bytes of each value
// (GETRANGE), so it never moves token lists; it skips tombstones. Values are untrusted on the way
// back: a value that does not decode exactly is deleted, counted (corrupt_values()) and reported as
// NOT_FOUND.
//
// Update is optimistic, so that several kvserve-cache processes sharing one Redis stay
// correct without a lock: it reads the value (GET, PTTL), runs the mutation, then writes
// with a Lua script (EVAL, atomic in Redis) only if the key still holds exactly the
// value it read (or is still absent); otherwise it reads again and retries, at most
// Options::max_update_attempts times, then fails with ABORTED. Tombstones are values
// like any record (closed in their encoding). Lease deadlines are absolute wall-clock
// times of the process that wrote them and are judged by each reader's clock, so the
// hosts of processes sharing one Redis need synchronized clocks (an offset of d makes
// leases d longer or shorter; record expiry is Redis' own and is not affected).
//
// Costs: Put, Get and Delete are one round trip; Update two per attempt (the write
// sends the value read back for the comparison). List and size() SCAN the whole keyspace
// (MATCH "kvs:*", COUNT Options::scan_count per round trip): O(all keys in the database)
// per call, plus one pipelined round trip per page-sized batch of candidate sessions
// (size() reads 46 bytes of each value, to leave tombstones out). Meant
// for operators' tools, not the request path.
//
// Errors: UNAVAILABLE whenever Redis cannot be reached; RESOURCE_EXHAUSTED when Redis
// refuses a write for memory (OOM) or the owner is longer than max_owner_bytes.
#ifndef KVSERVE_CACHESVC_REDIS_SESSION_STORE_H_
#define KVSERVE_CACHESVC_REDIS_SESSION_STORE_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cachesvc/block_store.h"
#include "cachesvc/redis_client.h"

namespace kvserve::cachesvc {

// Threading: every method is thread-safe.
class RedisSessionStore final : public SessionRecordStore {
 public:
  struct Options {
    // Longest owner name stored (default 256 bytes); bounds what List reads per session.
    int32_t max_owner_bytes = 256;
    // SCAN's COUNT hint: keys Redis examines per SCAN round trip (default 1000).
    int32_t scan_count = 1000;
    // Update: attempts before a lost race is ABORTED (default 16).
    int32_t max_update_attempts = 16;
  };

  // Does not contact Redis. INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<RedisSessionStore>> Create(
      std::shared_ptr<RedisClient> client, const Options& options);

  // SET kvs:<id> value PX (expires_at - now, rounded up to whole ms); no TTL when
  // expires_at is infinite; a record already expired at `now` is deleted instead.
  absl::Status Put(StoredSession session, absl::Time now) override;
  absl::StatusOr<SessionUpdate> Update(const std::string& id, const SessionMutation& mutate,
                                       absl::Time now) override;
  // GET and PTTL in one round trip; expires_at = now + PTTL.
  absl::StatusOr<StoredSession> Get(const std::string& id, absl::Time now) override;
  absl::Status Delete(const std::string& id, absl::Time now) override;
  // `page_token` is the last id of the previous page (opaque to callers); page_size <= 0
  // means 100, and at most 1000. The last page may be empty.
  absl::StatusOr<Page> List(const BlockHash* partition, int32_t page_size,
                            const std::string& page_token, absl::Time now) override;
  // Session keys in the database that are not tombstones (a full SCAN); 0 when Redis is
  // unreachable.
  int64_t size() const override;

  // Values this process found undecodable and deleted.
  int64_t corrupt_values() const { return corrupt_values_.load(); }
  // Update attempts whose write found the value changed since its read (lost races).
  int64_t update_conflicts() const { return update_conflicts_.load(); }

 private:
  RedisSessionStore(std::shared_ptr<RedisClient> client, const Options& options)
      : client_(std::move(client)), options_(options) {}
  // Every session id in the database, sorted, without duplicates.
  absl::StatusOr<std::vector<std::string>> ScanIds() const;
  void DropCorrupt(const std::string& key);

  const std::shared_ptr<RedisClient> client_;
  const Options options_;
  std::atomic<int64_t> corrupt_values_{0};
  std::atomic<int64_t> update_conflicts_{0};
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_REDIS_SESSION_STORE_H_
