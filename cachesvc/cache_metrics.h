// Every kvserve-cache Prometheus metric, declared in one place, and the totals GetStats
// reports (read back from the same counters, so the two never disagree).
//
// Per-call metrics are recorded by the service as calls finish. Store-wide state (blocks,
// bytes, capacity, sessions, evictions by reason) is read from the stores at scrape time
// through a StateSource: the stores know nothing of Prometheus.
//
// The process_* families (memory, CPU, file descriptors, start time) come from
// server::ProcessCollector, the same as kvserve's.
//
// Names follow kvserve_cache_<name>_<unit>; counters end in _total; time is in seconds.
//
// Threading: every method is thread-safe.
#ifndef KVSERVE_CACHESVC_CACHE_METRICS_H_
#define KVSERVE_CACHESVC_CACHE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "cachesvc/block_store.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metrics_http_server.h"
#include "server/process_metrics.h"

namespace kvserve::cachesvc {

// What the stores hold at one moment.
struct CacheState {
  BlockStoreStats blocks;
  int64_t sessions = 0;
};
using CacheStateSource = std::function<CacheState()>;

// The totals of CacheStats (session_cache.proto) that count events.
struct CacheTotals {
  int64_t lookups = 0;
  int64_t hit_blocks = 0;
  int64_t miss_blocks = 0;
  int64_t stored_blocks = 0;
  int64_t rejected_blocks = 0;
  int64_t bytes_stored = 0;
  int64_t bytes_served = 0;
};

class CacheMetrics final : public server::MetricsSource {
 public:
  CacheMetrics();
  CacheMetrics(const CacheMetrics&) = delete;
  CacheMetrics& operator=(const CacheMetrics&) = delete;

  // One Lookup of `chain_blocks` hashes that found `hit_blocks` of them.
  void RecordLookup(int64_t chain_blocks, int64_t hit_blocks);
  // FetchBlocks: one record served / blocks asked for but missing.
  void RecordServed(int64_t record_bytes);
  void RecordFetchMiss(int64_t blocks);
  // StoreBlocks: a record stored (or already present), rejected by a check (reason =
  // cache::RecordCheckName), or dropped for lack of room.
  void RecordStored(int64_t record_bytes);
  void RecordRejected(std::string_view reason);
  void RecordDropped();
  // One finished call: kvserve_cache_rpc_requests_total{method, code} and
  // kvserve_cache_rpc_duration_seconds{method}.
  void RecordRpc(const std::string& method, const std::string& code, absl::Duration latency);

  // Where the scrape-time gauges come from (replaces any previous source).
  void SetStateSource(CacheStateSource source);

  CacheTotals totals() const;
  std::string SerializeText() const override;

 private:
  class StateCollector;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<StateCollector> state_collector_;
  std::shared_ptr<server::ProcessCollector> process_collector_;

  prometheus::Counter& lookups_;
  prometheus::Counter& hit_blocks_;
  prometheus::Counter& miss_blocks_;
  prometheus::Counter& stored_blocks_;
  prometheus::Counter& stored_bytes_;
  prometheus::Counter& served_bytes_;
  prometheus::Counter& dropped_blocks_;
  prometheus::Family<prometheus::Counter>& rejected_blocks_;
  prometheus::Family<prometheus::Counter>& rpc_requests_;
  prometheus::Family<prometheus::Histogram>& rpc_duration_;
  std::atomic<int64_t> rejected_total_{0};
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_CACHE_METRICS_H_
