// The Redis backend of the block store: one Redis string per block, header and payload
// together in one value (never split, so a reader sees all of a record or none of it).
//
// Keys: "kvb:<partition hex>:<hash hex>" (HashHex, 32 digits each). No Redis Cluster hash
// tag: a tenant's blocks spread over all slots instead of loading one node; Lookup is a
// pipeline of single-key commands, which a cluster-aware proxy can split per node (a Lua
// script over the chain would need every key in one slot). This client itself talks to
// one Redis server.
//
// Eviction is Redis' own: the operator sets maxmemory and `maxmemory-policy allkeys-lru`
// (or allkeys-lfu). Redis then evicts single keys without knowing chains, so a chain may
// lose a middle block: Lookup then reports the prefix before the hole (the blocks after
// it are unreachable until rewritten, and age out), and every record read is re-checked
// whole, so a gap or a bad value is a miss, never wrong data. With the default
// `noeviction` a full Redis refuses writes (Put answers kNoRoom). Lookup's STRLEN reads
// count as a use for Redis' LRU/LFU.
//
// Errors: every failure to reach Redis (refused, timeout, reset) is UNAVAILABLE; the
// service answers UNAVAILABLE and the engine recomputes.
#ifndef KVSERVE_CACHESVC_REDIS_BLOCK_STORE_H_
#define KVSERVE_CACHESVC_REDIS_BLOCK_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cachesvc/block_store.h"
#include "cachesvc/redis_client.h"
#include "cachesvc/storage_common.h"

namespace kvserve::cachesvc {

// "kvb:<partition hex>:<hash hex>".
std::string RedisBlockKey(const BlockHash& partition, const BlockHash& key);

// Threading: every method is thread-safe (RedisClient's pool; counters are locked).
class RedisBlockStore final : public BlockStore {
 public:
  struct Options {
    // Lifetime of a block key (--redis-block-ttl; default none: Redis' maxmemory policy
    // alone evicts). Set with SET ... PX at each Put.
    absl::Duration block_ttl = absl::InfiniteDuration();
  };

  // Does not contact Redis. INVALID_ARGUMENT for a non-positive finite TTL.
  static absl::StatusOr<std::unique_ptr<RedisBlockStore>> Create(
      std::shared_ptr<RedisClient> client, const Options& options);

  // One pipelined round trip: STRLEN of every key of the chain; the prefix ends at the
  // first key that is absent (STRLEN 0).
  absl::StatusOr<LookupResult> Lookup(const BlockHash& partition, std::span<const BlockHash> chain,
                                      absl::Time now) override;
  // GET, then CheckStoredRecord: a value that fails is deleted (DEL), counted under
  // "corrupt_<reason>" and reported as a miss (nullptr).
  absl::StatusOr<RecordPtr> Get(const BlockKey& key, absl::Time now) override;
  // SET NX [PX block_ttl]: kAlreadyPresent when the key exists, kNoRoom when Redis
  // refuses for memory (OOM error reply under noeviction).
  absl::StatusOr<PutOutcome> Put(const BlockKey& key, const BlockHash& parent, RecordPtr record,
                                 absl::Time now) override;
  // DEL, best effort (a failure is ignored: the reader re-checks anyway).
  void Erase(const BlockKey& key) override;
  // One round trip (DBSIZE, INFO): blocks = keys in the database (session keys
  // included), bytes = Redis' used_memory, capacity_bytes = maxmemory (0: unlimited);
  // evictions: "redis_evicted" (Redis' evicted_keys, all keys), the corrupt values this
  // process dropped and "redis_oom", each from the start (at 0). Zeros (but the local
  // counts) when Redis is unreachable.
  BlockStoreStats stats() const override;
  std::string name() const override { return "redis"; }

 private:
  RedisBlockStore(std::shared_ptr<RedisClient> client, const Options& options)
      : client_(std::move(client)), options_(options), drops_(DropReasons()) {}
  // The reasons this process counts: corrupt values and "redis_oom".
  static std::vector<std::string> DropReasons();

  const std::shared_ptr<RedisClient> client_;
  const Options options_;
  DropCounters drops_;
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_REDIS_BLOCK_STORE_H_
