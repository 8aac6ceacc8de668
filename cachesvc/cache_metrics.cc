#include "cachesvc/cache_metrics.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "cache/block_record.h"
#include "google/protobuf/descriptor.h"
#include "kvserve/v1/session_cache.pb.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "server/metric_family.h"

namespace kvserve::cachesvc {
namespace {

using prometheus::Histogram;

// Bucket upper bounds in seconds: from a memory Lookup to a large fetch.
Histogram::BucketBoundaries RpcBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

prometheus::Counter& AddCounter(prometheus::Registry& registry, const std::string& name,
                                const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

// The methods of kvserve.v1.SessionCache, as RecordRpc names them (the proto's names).
std::vector<std::string> SessionCacheMethods() {
  const google::protobuf::ServiceDescriptor* service =
      v1::LookupRequest::descriptor()->file()->FindServiceByName("SessionCache");
  std::vector<std::string> methods;
  for (int i = 0; i < service->method_count(); ++i) methods.push_back(service->method(i)->name());
  return methods;
}

}  // namespace

// Turns one CacheState snapshot into gauges and eviction counters at scrape time.
class CacheMetrics::StateCollector : public prometheus::Collectable {
 public:
  void SetSource(CacheStateSource source) {
    std::lock_guard<std::mutex> lock(mu_);
    source_ = std::move(source);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    CacheState state;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!source_) return {};
      state = source_();
    }
    using prometheus::MetricType;
    std::vector<prometheus::MetricFamily> out;
    auto gauge = [&out](const std::string& name, const std::string& help, double value) {
      out.push_back(server::SingleValueFamily(name, help, MetricType::Gauge, value));
    };
    gauge("kvserve_cache_blocks", "Block records held.", static_cast<double>(state.blocks.blocks));
    gauge("kvserve_cache_bytes", "Bytes of the block records held.",
          static_cast<double>(state.blocks.bytes));
    gauge("kvserve_cache_capacity_bytes", "Capacity for block records.",
          static_cast<double>(state.blocks.capacity_bytes));
    gauge("kvserve_cache_sessions", "Session records held.", static_cast<double>(state.sessions));
    out.push_back(server::MakeFamily("kvserve_cache_evicted_blocks_total",
                                     "Block records evicted, by reason.", MetricType::Counter));
    for (const auto& [reason, count] : state.blocks.evictions) {
      server::AddSample(out.back(), static_cast<double>(count), {{"reason", reason}});
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  CacheStateSource source_ ABSL_GUARDED_BY(mu_);
};

CacheMetrics::CacheMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      state_collector_(std::make_shared<StateCollector>()),
      process_collector_(std::make_shared<server::ProcessCollector>()),
      lookups_(AddCounter(*registry_, "kvserve_cache_lookups_total", "Lookup calls answered.")),
      hit_blocks_(AddCounter(*registry_, "kvserve_cache_hit_blocks_total",
                             "Blocks that Lookup found (the present prefixes).")),
      miss_blocks_(AddCounter(*registry_, "kvserve_cache_miss_blocks_total",
                              "Blocks that Lookup or FetchBlocks asked for and did not find.")),
      stored_blocks_(AddCounter(*registry_, "kvserve_cache_stored_blocks_total",
                                "Block records StoreBlocks accepted (stored or already present).")),
      stored_bytes_(AddCounter(*registry_, "kvserve_cache_stored_bytes_total",
                               "Bytes of the block records StoreBlocks accepted.")),
      served_bytes_(AddCounter(*registry_, "kvserve_cache_served_bytes_total",
                               "Bytes of the block records FetchBlocks sent.")),
      dropped_blocks_(AddCounter(*registry_, "kvserve_cache_dropped_blocks_total",
                                 "Checked block records not stored for lack of room.")),
      rejected_blocks_(prometheus::BuildCounter()
                           .Name("kvserve_cache_rejected_blocks_total")
                           .Help("Block records StoreBlocks rejected, by the check that failed.")
                           .Register(*registry_)),
      rpc_requests_(prometheus::BuildCounter()
                        .Name("kvserve_cache_rpc_requests_total")
                        .Help("Finished SessionCache calls, by method and status code.")
                        .Register(*registry_)),
      rpc_duration_(prometheus::BuildHistogram()
                        .Name("kvserve_cache_rpc_duration_seconds")
                        .Help("Time from a SessionCache call's start to its status, by method.")
                        .Register(*registry_)) {
  // Every rejection reason is exported from the start (at 0), so that the family exists and
  // rates over it work before the first rejection.
  for (int check = static_cast<int>(cache::RecordCheck::kTruncated);
       check <= static_cast<int>(cache::RecordCheck::kWrongTokens); ++check) {
    rejected_blocks_.Add(
        {{"reason", std::string(cache::RecordCheckName(static_cast<cache::RecordCheck>(check)))}});
  }
  // So is every method's duration and every (method, code) pair of the call counter (as
  // grpc-ecosystem's go-grpc-prometheus does), for error-ratio alerts and per-code panels.
  for (const std::string& method : SessionCacheMethods()) {
    rpc_duration_.Add({{"method", method}}, RpcBuckets());
    for (int code = 0; code <= static_cast<int>(absl::StatusCode::kUnauthenticated); ++code) {
      rpc_requests_.Add({{"method", method},
                         {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}});
    }
  }
}

void CacheMetrics::RecordLookup(int64_t chain_blocks, int64_t hit_blocks) {
  lookups_.Increment();
  hit_blocks_.Increment(static_cast<double>(hit_blocks));
  miss_blocks_.Increment(static_cast<double>(chain_blocks - hit_blocks));
}

void CacheMetrics::RecordServed(int64_t record_bytes) {
  served_bytes_.Increment(static_cast<double>(record_bytes));
}

void CacheMetrics::RecordFetchMiss(int64_t blocks) {
  miss_blocks_.Increment(static_cast<double>(blocks));
}

void CacheMetrics::RecordStored(int64_t record_bytes) {
  stored_blocks_.Increment();
  stored_bytes_.Increment(static_cast<double>(record_bytes));
}

void CacheMetrics::RecordRejected(std::string_view reason) {
  rejected_blocks_.Add({{"reason", std::string(reason)}}).Increment();
  rejected_total_.fetch_add(1, std::memory_order_relaxed);
}

void CacheMetrics::RecordDropped() { dropped_blocks_.Increment(); }

void CacheMetrics::RecordRpc(const std::string& method, const std::string& code,
                             absl::Duration latency) {
  rpc_requests_.Add({{"method", method}, {"code", code}}).Increment();
  rpc_duration_.Add({{"method", method}}, RpcBuckets()).Observe(absl::ToDoubleSeconds(latency));
}

void CacheMetrics::SetStateSource(CacheStateSource source) {
  state_collector_->SetSource(std::move(source));
}

CacheTotals CacheMetrics::totals() const {
  CacheTotals t;
  t.lookups = static_cast<int64_t>(lookups_.Value());
  t.hit_blocks = static_cast<int64_t>(hit_blocks_.Value());
  t.miss_blocks = static_cast<int64_t>(miss_blocks_.Value());
  t.stored_blocks = static_cast<int64_t>(stored_blocks_.Value());
  t.rejected_blocks = rejected_total_.load(std::memory_order_relaxed);
  t.bytes_stored = static_cast<int64_t>(stored_bytes_.Value());
  t.bytes_served = static_cast<int64_t>(served_bytes_.Value());
  return t;
}

std::string CacheMetrics::SerializeText() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& f : state_collector_->Collect()) families.push_back(std::move(f));
  for (prometheus::MetricFamily& f : process_collector_->Collect())
    families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace kvserve::cachesvc
