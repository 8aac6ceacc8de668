// The engine's link to a session cache service for KV blocks: fetches KV that other
// replicas (or this one before a restart) computed, and writes this engine's new blocks
// behind, all on worker threads so the step thread never waits on the network. Session
// records are engine::SessionManager's (engine/session_manager.h).
//
// Fetch: for a sequence whose context has full blocks beyond what the local pool holds,
// one Lookup of the whole chain; when the service holds more than the local prefix and
// the estimated transfer (bytes / measured bandwidth + a round trip) beats recomputing
// (tokens x measured prefill seconds per token), the missing blocks are fetched and each
// record is checked whole (format, checksum, hash chain, identity, layout, parent, hash
// and the sequence's own token ids), then its payload is copied straight into the pool
// block the engine reserved for it (FetchJob::destinations), on the tier's thread: the
// step thread only links the written blocks (KvCacheManager::FinishImport), and no
// record outlives its copy. The first bad or missing record ends the fetch: what came
// before it is used, the rest is recomputed. Every error is a miss; no call outlives
// Options::timeout.
//
// Store: after a request, the blocks it committed are held for export (the step thread
// pins them; they cannot change) and written behind: one Lookup finds what the service
// already has, only the rest is sent. The queue is
// bounded; a job that does not fit is dropped and counted (the engine then releases its
// blocks at once).
//
// Incidents: when a call fails after a success (or at the first call), one line is
// logged; the next success logs one line again. Per-request failures are only counted.
//
// Threading: Fetch/Store/stats are thread-safe and never block for long. Callbacks run on
// worker threads.
#ifndef KVSERVE_ENGINE_REMOTE_TIER_H_
#define KVSERVE_ENGINE_REMOTE_TIER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache/block_hash.h"
#include "cache/kv_cache_manager.h"
#include "cache/remote_kv_cache.h"
#include "engine/engine.h"
#include "model/kv_layout.h"

namespace kvserve::engine {

class RemoteTier {
 public:
  struct Options {
    // Deadline of each remote call (lookup, fetch, store, session). Default 2 s.
    absl::Duration timeout = absl::Seconds(2);
    // Fetch only when the service has at least this many blocks more than the local
    // pool. Default 1.
    int32_t min_fetch_blocks = 1;
    // Store jobs (finished requests' blocks) waiting to be written; more are dropped.
    // Default 64.
    int32_t max_pending_stores = 64;
    // Pool blocks that fetches in flight may reserve for their payloads, as a fraction
    // of the pool: a fetch holds the blocks its payloads go to until the step thread
    // links them, while the sequences that run need blocks too. A fetch reserves at most
    // what is left under the cap (the rest of its prompt is computed); when that is fewer
    // than min_fetch_blocks it does not fetch. In (0, 1]; default 0.5.
    double max_import_fraction = 0.5;
    // Fetch whatever the service holds beyond the local pool, even when recomputing it is
    // estimated faster (a replica whose CPU is better spent elsewhere; tests that must
    // see a fetch). Default false: fetch only what is estimated faster to transfer.
    bool always_fetch = false;
    // Transfer rate assumed until fetches have measured one. Default 1 GB/s.
    double initial_bytes_per_second = 1e9;
    // Where incident lines go; default: stderr.
    std::function<void(std::string_view)> log;
    // This replica's name in session records.
    std::string owner;
  };

  struct FetchJob {
    RequestId id = 0;
    cache::BlockHash partition;           // the chain root
    std::vector<int32_t> tokens;          // the context's tokens of its full blocks
    std::vector<cache::BlockHash> chain;  // keys of those blocks
    int32_t local_blocks = 0;             // leading blocks the pool held when asked
    // Memory of the pool blocks reserved for chain[local_blocks ..] (at most that many;
    // layout.block_bytes() each): the tier writes them until it hands back the
    // FetchResult, and fetches no more blocks than there are.
    std::vector<uint8_t*> destinations;
    double prefill_seconds_per_token = 0.0;  // the engine's estimate (0: unknown)
    absl::Time deadline = absl::InfiniteFuture();
  };
  struct FetchResult {
    RequestId id = 0;
    int32_t first = 0;    // the chain index of destinations[0]
    int32_t written = 0;  // destinations[0, written) hold checked payloads, in chain order
  };
  struct StoreJob {
    uint64_t key = 0;  // the export holder to release when done
    cache::BlockHash partition;
    std::vector<int32_t> tokens;  // the chain's tokens (at least blocks x block_tokens)
    std::vector<cache::KvCacheManager::ExportBlock> blocks;
  };

  // `remote` must outlive the tier. `on_fetched` gets every FetchJob's result (possibly
  // empty) exactly once; `on_stored` every accepted StoreJob's key exactly once, after
  // the tier stopped reading its blocks.
  RemoteTier(cache::RemoteKvCache* remote, const Options& options, const model::KvLayout& layout,
             int32_t kv_heads, std::function<void(FetchResult)> on_fetched,
             std::function<void(uint64_t)> on_stored);
  // Stops the workers (a running call ends within the timeout); jobs still queued get
  // their callbacks (fetches empty, stores unsent).
  ~RemoteTier();
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  void Fetch(FetchJob job);
  // False (nothing queued, counted as dropped) when Options::max_pending_stores jobs wait.
  bool Store(StoreJob job);

  RemoteCacheStats stats() const;

 private:
  void FetchLoop();
  void StoreLoop();
  FetchResult RunFetch(const FetchJob& job);
  void RunStore(StoreJob& job);
  // Counts a call's outcome and logs incidents (see the header comment).
  void Observe(const absl::Status& status, std::string_view what);
  absl::Time Deadline(absl::Time limit = absl::InfiniteFuture()) const;

  cache::RemoteKvCache* const remote_;
  const Options options_;
  const model::KvLayout layout_;
  const int32_t kv_heads_;
  const std::function<void(FetchResult)> on_fetched_;
  const std::function<void(uint64_t)> on_stored_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<FetchJob> fetches_ ABSL_GUARDED_BY(mu_);
  std::deque<StoreJob> stores_ ABSL_GUARDED_BY(mu_);
  int32_t pending_store_jobs_ ABSL_GUARDED_BY(mu_) = 0;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t failed_calls_in_incident_ ABSL_GUARDED_BY(mu_) = 0;
  double bytes_per_second_ ABSL_GUARDED_BY(mu_);
  RemoteCacheStats stats_ ABSL_GUARDED_BY(mu_);

  // Last members: started after everything they use, joined in the destructor.
  std::thread fetch_thread_;
  std::thread store_thread_;
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_REMOTE_TIER_H_
