#include "service/metrics.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "kvserve/v1/inference.pb.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "server/metric_family.h"
#include "service/grpc_status.h"

namespace kvserve::service {
namespace {

using prometheus::Histogram;

// Bucket upper bounds in seconds.
Histogram::BucketBoundaries LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}
// A whole generation: long completions on a loaded CPU run for minutes, and a quantile
// above the last finite bucket reads as that bucket's bound.
Histogram::BucketBoundaries EndToEndBuckets() {
  Histogram::BucketBoundaries buckets = LatencyBuckets();
  buckets.insert(buckets.end(), {300, 600, 1200, 1800, 3600});
  return buckets;
}
Histogram::BucketBoundaries InterTokenBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
}

prometheus::Counter& AddCounter(prometheus::Registry& registry, const std::string& name,
                                const std::string& help, const prometheus::Labels& labels = {}) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
}

Histogram& AddHistogram(prometheus::Registry& registry, const std::string& name,
                        const std::string& help, const Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add({}, buckets);
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// The methods of kvserve.v1.Inference, as RecordRpc names them (the proto's names).
std::vector<std::string> InferenceMethods() {
  const google::protobuf::ServiceDescriptor* service =
      v1::GenerateRequest::descriptor()->file()->FindServiceByName("Inference");
  std::vector<std::string> methods;
  for (int i = 0; i < service->method_count(); ++i) methods.push_back(service->method(i)->name());
  return methods;
}

}  // namespace

std::string FinishReasonLabel(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop:
      return "stop";
    case engine::FinishReason::kStopString:
      return "stop_string";
    case engine::FinishReason::kLength:
      return "length";
    case engine::FinishReason::kCancelled:
      return "cancelled";
    case engine::FinishReason::kDeadline:
      return "deadline";
    case engine::FinishReason::kError:
      return "error";
  }
  return "unknown";
}

// Turns one engine::EngineStats snapshot into gauges and counters at scrape time.
class Metrics::EngineCollector : public prometheus::Collectable {
 public:
  void SetSource(EngineStatsSource source) {
    std::lock_guard<std::mutex> lock(mu_);
    source_ = std::move(source);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::optional<engine::EngineStats> stats;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (source_) stats = source_();
    }
    if (!stats.has_value()) return {};
    std::vector<prometheus::MetricFamily> out;
    auto add = [&out](const std::string& name, const std::string& help, prometheus::MetricType type,
                      double value) {
      out.push_back(server::SingleValueFamily(name, help, type, value));
    };
    using prometheus::MetricType;
    add("kvserve_engine_requests_running", "Requests in the running batch.", MetricType::Gauge,
        stats->running);
    add("kvserve_engine_requests_waiting", "Requests queued, not yet running.", MetricType::Gauge,
        stats->waiting);
    add("kvserve_kv_blocks_total", "KV blocks in the pool.", MetricType::Gauge,
        static_cast<double>(stats->blocks_total));
    add("kvserve_kv_blocks_used", "KV blocks referenced by a live sequence or session.",
        MetricType::Gauge, static_cast<double>(stats->blocks_used));
    add("kvserve_kv_blocks_cached", "Unreferenced KV blocks still findable by prefix hash.",
        MetricType::Gauge, static_cast<double>(stats->blocks_cached));
    add("kvserve_kv_blocks_free", "KV blocks holding nothing.", MetricType::Gauge,
        static_cast<double>(stats->blocks_free));
    add("kvserve_sessions_open", "Open conversation sessions.", MetricType::Gauge,
        stats->open_sessions);
    add("kvserve_prefix_cache_queries_total", "KV blocks looked up in the prefix cache.",
        MetricType::Counter, static_cast<double>(stats->prefix_queries_total));
    add("kvserve_prefix_cache_hits_total", "KV blocks found in the prefix cache.",
        MetricType::Counter, static_cast<double>(stats->prefix_hits_total));
    add("kvserve_kv_evictions_total", "Cached KV blocks reused for new data.", MetricType::Counter,
        static_cast<double>(stats->evictions_total));
    add("kvserve_kv_blocks_session", "KV block references held by sessions between turns.",
        MetricType::Gauge, static_cast<double>(stats->session_blocks));
    add("kvserve_sessions_kv_reclaimed_total",
        "Sessions whose KV blocks were taken back for other requests (their next turn "
        "recomputes what was evicted).",
        MetricType::Counter, static_cast<double>(stats->session_reclaims_total));
    add("kvserve_engine_preemptions_total", "Running requests preempted for lack of KV blocks.",
        MetricType::Counter, static_cast<double>(stats->preemptions_total));
    add("kvserve_engine_steps_total", "Engine steps (batched forward passes).", MetricType::Counter,
        static_cast<double>(stats->steps_total));
    add("kvserve_engine_last_step_seconds", "Duration of the most recent engine step.",
        MetricType::Gauge, stats->last_step_seconds);
    if (stats->remote.enabled) AddRemote(stats->remote, add, out);
    if (!stats->speculative.source.empty()) AddSpeculative(stats->speculative, out);
    return out;
  }

 private:
  // Speculative decoding's families (only with a draft source), labelled by source.
  static void AddSpeculative(const engine::SpeculativeStats& s,
                             std::vector<prometheus::MetricFamily>& out) {
    using prometheus::MetricType;
    auto counter = [&](const char* name, const char* help, int64_t value) {
      prometheus::MetricFamily f = server::MakeFamily(name, help, MetricType::Counter);
      server::AddSample(f, static_cast<double>(value), {{"source", s.source}});
      out.push_back(std::move(f));
    };
    counter("kvserve_speculative_draft_tokens_total",
            "Speculative draft tokens checked against the model.", s.draft_tokens_total);
    counter("kvserve_speculative_accepted_tokens_total",
            "Speculative draft tokens the model accepted (emitted without a step of their own).",
            s.accepted_tokens_total);
    counter("kvserve_speculative_verifications_total",
            "Sequence steps that checked at least one draft token.", s.verifications_total);
    // Accepted drafts per verification, as a histogram with one bucket per length.
    prometheus::MetricFamily lengths;
    lengths.name = "kvserve_speculative_accepted_length_tokens";
    lengths.help = "Draft tokens accepted per verification.";
    lengths.type = MetricType::Histogram;
    prometheus::ClientMetric metric;
    metric.label.push_back({"source", s.source});
    uint64_t cumulative = 0;
    double sum = 0.0;
    for (size_t a = 0; a < s.accepted_length_counts.size(); ++a) {
      cumulative += static_cast<uint64_t>(s.accepted_length_counts[a]);
      sum += static_cast<double>(a) * static_cast<double>(s.accepted_length_counts[a]);
      metric.histogram.bucket.push_back({cumulative, static_cast<double>(a)});
    }
    metric.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
    metric.histogram.sample_count = cumulative;
    metric.histogram.sample_sum = sum;
    lengths.metric.push_back(std::move(metric));
    out.push_back(std::move(lengths));
  }

  // The session cache service's families (only with --session_cache).
  template <typename Add>
  static void AddRemote(const engine::RemoteCacheStats& r, Add& add,
                        std::vector<prometheus::MetricFamily>& out) {
    using prometheus::MetricType;
    add("kvserve_session_cache_up",
        "1 while the last call to the session cache service succeeded, else 0.", MetricType::Gauge,
        r.failing ? 0.0 : 1.0);
    add("kvserve_session_cache_lookups_total", "Chains looked up in the session cache service.",
        MetricType::Counter, static_cast<double>(r.lookups_total));
    add("kvserve_session_cache_lookup_blocks_total",
        "Blocks the session cache service held beyond the local prefix.", MetricType::Counter,
        static_cast<double>(r.lookup_blocks_total));
    add("kvserve_session_cache_fetches_skipped_total",
        "Remote hits not fetched because recomputing was estimated faster.", MetricType::Counter,
        static_cast<double>(r.fetches_skipped_total));
    add("kvserve_session_cache_fetched_blocks_total",
        "Checked blocks fetched from the session cache service.", MetricType::Counter,
        static_cast<double>(r.fetched_blocks_total));
    add("kvserve_session_cache_fetched_bytes_total", "Record bytes fetched.", MetricType::Counter,
        static_cast<double>(r.fetched_bytes_total));
    add("kvserve_session_cache_fetch_seconds_total", "Time spent in fetch calls.",
        MetricType::Counter, r.fetch_seconds_total);
    add("kvserve_session_cache_stored_blocks_total", "Blocks written behind.", MetricType::Counter,
        static_cast<double>(r.stored_blocks_total));
    add("kvserve_session_cache_stored_bytes_total", "Record bytes written behind.",
        MetricType::Counter, static_cast<double>(r.stored_bytes_total));
    add("kvserve_session_cache_store_dropped_total",
        "Write-behind jobs dropped (queue full or the service failing).", MetricType::Counter,
        static_cast<double>(r.store_dropped_total));
    add("kvserve_session_cache_errors_total", "Failed calls to the session cache service.",
        MetricType::Counter, static_cast<double>(r.errors_total));
    add("kvserve_session_cache_sessions_restored_total",
        "Sessions unknown here continued from the session cache service.", MetricType::Counter,
        static_cast<double>(r.sessions_restored_total));
    add("kvserve_session_cache_sessions_refreshed_total",
        "Local sessions replaced by the session cache service's record of another version "
        "(the session continued on another replica).",
        MetricType::Counter, static_cast<double>(r.sessions_refreshed_total));
    add("kvserve_session_cache_session_commits_total",
        "Session turns whose record was committed to the session cache service before their "
        "answer.",
        MetricType::Counter, static_cast<double>(r.session_commits_total));
    add("kvserve_session_cache_session_conflicts_total",
        "Session turns refused because another turn held the session (on any replica), or "
        "whose commit found the session changed or closed elsewhere.",
        MetricType::Counter, static_cast<double>(r.session_conflicts_total));
    prometheus::MetricFamily rejected =
        server::MakeFamily("kvserve_session_cache_rejected_blocks_total",
                           "Fetched records that failed a check (and were recomputed), by reason.",
                           MetricType::Counter);
    for (const auto& [reason, count] : r.rejected_by_reason) {
      server::AddSample(rejected, static_cast<double>(count), {{"reason", reason}});
    }
    out.push_back(std::move(rejected));
  }

  mutable std::mutex mu_;
  EngineStatsSource source_ ABSL_GUARDED_BY(mu_);
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      engine_collector_(std::make_shared<EngineCollector>()),
      process_collector_(std::make_shared<server::ProcessCollector>()),
      build_info_(prometheus::BuildGauge()
                      .Name("kvserve_build_info")
                      .Help("Always 1; the labels say what runs: version, git commit, backend, "
                            "SIMD kernel level, OpenBLAS core.")
                      .Register(*registry_)),
      degraded_path_(prometheus::BuildGauge()
                         .Name("kvserve_degraded_path")
                         .Help("1 when a slow path runs by accident: blas_core (OpenBLAS runs an "
                               "older core than the CPU supports), simd_kernels (scalar "
                               "fallback); else 0.")
                         .Register(*registry_)),
      rpc_requests_(prometheus::BuildCounter()
                        .Name("kvserve_rpc_requests_total")
                        .Help("Finished calls by protocol (grpc, http: the OpenAI-compatible "
                              "API), method and status code (canonical gRPC code names).")
                        .Register(*registry_)),
      http_responses_(prometheus::BuildCounter()
                          .Name("kvserve_http_requests_total")
                          .Help("Responses of the HTTP API port by HTTP status (every path).")
                          .Register(*registry_)),
      http_connections_(prometheus::BuildGauge()
                            .Name("kvserve_http_connections")
                            .Help("Open connections of the HTTP API port.")
                            .Register(*registry_)
                            .Add({})),
      finished_(prometheus::BuildCounter()
                    .Name("kvserve_request_finished_total")
                    .Help("Finished generations by finish reason.")
                    .Register(*registry_)),
      prompt_tokens_(AddCounter(*registry_, "kvserve_request_prompt_tokens_total",
                                "Prompt tokens of finished generations (history included).")),
      cached_tokens_(prometheus::BuildCounter()
                         .Name("kvserve_request_cached_tokens_total")
                         .Help("Prompt tokens served from cached KV, by source (local, remote).")
                         .Register(*registry_)),
      cached_tokens_local_(cached_tokens_.Add({{"source", "local"}})),
      cached_tokens_remote_(cached_tokens_.Add({{"source", "remote"}})),
      computed_tokens_(AddCounter(*registry_, "kvserve_request_computed_tokens_total",
                                  "Prompt tokens prefilled (not served from cache).")),
      generated_tokens_(AddCounter(*registry_, "kvserve_request_generated_tokens_total",
                                   "Completion tokens generated.")),
      time_to_first_token_(AddHistogram(*registry_, "kvserve_request_time_to_first_token_seconds",
                                        "From arrival to the first generated token.",
                                        LatencyBuckets())),
      inter_token_latency_(AddHistogram(*registry_, "kvserve_request_inter_token_latency_seconds",
                                        "Gap between consecutive tokens of a request.",
                                        InterTokenBuckets())),
      e2e_latency_(AddHistogram(*registry_, "kvserve_request_e2e_latency_seconds",
                                "From arrival to the end of generation.", EndToEndBuckets())),
      queue_time_(AddHistogram(*registry_, "kvserve_request_queue_time_seconds",
                               "From arrival to the first engine step that ran the request.",
                               LatencyBuckets())),
      prefill_time_(AddHistogram(*registry_, "kvserve_request_prefill_time_seconds",
                                 "From the first engine step to the first token.",
                                 LatencyBuckets())) {
  // Export every finish reason from the start (at 0), so that rates over them work
  // before the first occurrence.
  for (engine::FinishReason reason :
       {engine::FinishReason::kStop, engine::FinishReason::kStopString,
        engine::FinishReason::kLength, engine::FinishReason::kCancelled,
        engine::FinishReason::kDeadline, engine::FinishReason::kError}) {
    finished_.Add({{"reason", FinishReasonLabel(reason)}});
  }
  // And every (method, code) pair of the RPC counter (as grpc-ecosystem's
  // go-grpc-prometheus does), so that error-ratio alerts and per-code panels have a
  // series to read before the first call of each kind.
  const std::vector<std::string> http_methods = {kHttpChatCompletions, kHttpCompletions,
                                                 kHttpModels};
  for (std::string_view protocol : {kGrpc, kHttp}) {
    for (const std::string& method : protocol == kGrpc ? InferenceMethods() : http_methods) {
      for (int code = 0; code <= static_cast<int>(grpc::StatusCode::UNAUTHENTICATED); ++code) {
        rpc_requests_.Add({{"protocol", std::string(protocol)},
                           {"method", method},
                           {"code", GrpcCodeName(static_cast<grpc::StatusCode>(code))}});
      }
    }
  }
}

void Metrics::SetBuildInfo(const backends::RuntimeInfo& info) {
  build_info_
      .Add({{"version", info.version},
            {"commit", info.commit},
            {"backend", info.backend},
            {"kernel_level", info.kernel_level},
            {"blas_core", info.blas_core}})
      .Set(1.0);
  degraded_path_.Add({{"path", "blas_core"}}).Set(info.blas_core_degraded ? 1.0 : 0.0);
  degraded_path_.Add({{"path", "simd_kernels"}}).Set(info.kernels_degraded ? 1.0 : 0.0);
}

void Metrics::RecordRpc(std::string_view protocol, const std::string& method,
                        const std::string& code) {
  rpc_requests_.Add({{"protocol", std::string(protocol)}, {"method", method}, {"code", code}})
      .Increment();
}

void Metrics::RecordHttpResponse(int status) {
  http_responses_.Add({{"status", std::to_string(status)}}).Increment();
}

void Metrics::AddHttpConnections(int delta) { http_connections_.Increment(delta); }

void Metrics::RecordGeneration(engine::FinishReason reason, const engine::Usage& usage) {
  finished_.Add({{"reason", FinishReasonLabel(reason)}}).Increment();
  prompt_tokens_.Increment(usage.prompt_tokens);
  cached_tokens_local_.Increment(usage.cached_tokens);
  cached_tokens_remote_.Increment(usage.cached_tokens_remote);
  computed_tokens_.Increment(usage.computed_tokens);
  generated_tokens_.Increment(usage.completion_tokens);
  e2e_latency_.Observe(Seconds(usage.total_time));
  queue_time_.Observe(Seconds(usage.queue_time));
  if (usage.completion_tokens > 0) {
    time_to_first_token_.Observe(Seconds(usage.time_to_first_token));
    prefill_time_.Observe(Seconds(usage.time_to_first_token - usage.queue_time));
  }
}

void Metrics::RecordInterTokenLatency(absl::Duration gap) {
  inter_token_latency_.Observe(Seconds(gap));
}

void Metrics::SetEngineStatsSource(EngineStatsSource source) {
  engine_collector_->SetSource(std::move(source));
}

std::vector<std::weak_ptr<prometheus::Collectable>> Metrics::collectables() const {
  return {registry_, engine_collector_, process_collector_};
}

std::string Metrics::SerializeText() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (auto& family : engine_collector_->Collect()) families.push_back(std::move(family));
  for (auto& family : process_collector_->Collect()) families.push_back(std::move(family));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace kvserve::service
