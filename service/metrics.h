// Every kvserve Prometheus metric, declared in one place.
//
// Per-request metrics (latency histograms, token and status counters) are recorded by
// the service as requests finish. Engine-wide state (queue depths, KV blocks, prefix
// cache and preemption counters, open sessions) is read from engine::EngineStats at
// scrape time by a collector: the engine knows nothing of Prometheus.
//
// Process figures (process_resident_memory_bytes, process_cpu_seconds_total,
// process_open_fds, process_start_time_seconds, ...) come from ProcessCollector
// (server/process_metrics.h), read from procfs at scrape time; kvserve-cache exports the
// same families through the same collector.
//
// Names follow kvserve_<subsystem>_<name>_<unit>; counters end in _total; time is in
// seconds.
#ifndef KVSERVE_SERVICE_METRICS_H_
#define KVSERVE_SERVICE_METRICS_H_

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/runtime_info.h"
#include "engine/engine.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metrics_http_server.h"
#include "server/process_metrics.h"

namespace kvserve::service {

// Reads engine stats at scrape time; returns nullopt while no engine is attached.
using EngineStatsSource = std::function<std::optional<engine::EngineStats>()>;

// Threading: every method is thread-safe (prometheus-cpp metrics are internally
// synchronized; the stats source is guarded by a mutex).
// The `protocol` label values of kvserve_rpc_requests_total.
inline constexpr std::string_view kGrpc = "grpc";
inline constexpr std::string_view kHttp = "http";
// The `method` label values of the HTTP API's calls (service/http_api.h).
inline constexpr char kHttpChatCompletions[] = "chat.completions";
inline constexpr char kHttpCompletions[] = "completions";
inline constexpr char kHttpModels[] = "models";

class Metrics : public server::MetricsSource {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // One finished call of either front: kvserve_rpc_requests_total{protocol, method, code};
  // `protocol` is kGrpc or kHttp, `code` the canonical status name ("OK", "CANCELLED").
  void RecordRpc(std::string_view protocol, const std::string& method, const std::string& code);
  // One HTTP response of the OpenAI-compatible API port, any path:
  // kvserve_http_requests_total{status}.
  void RecordHttpResponse(int status);
  // Open connections of the HTTP API port: kvserve_http_connections.
  void AddHttpConnections(int delta);
  // One finished generation (any outcome): finish reason counter, token counters and
  // the latency histograms from the engine's usage. Time to first token and prefill
  // time are observed only when a token was generated.
  void RecordGeneration(engine::FinishReason reason, const engine::Usage& usage);
  // The gap between two consecutive tokens of one request.
  void RecordInterTokenLatency(absl::Duration gap);

  // What this process runs: kvserve_build_info{version, commit, backend, kernel_level,
  // blas_core} = 1, and kvserve_degraded_path{path} = 1 for each slow path taken by
  // accident, else 0: path="blas_core" (OpenBLAS runs an older core than this CPU
  // supports), path="simd_kernels" (cpu_blas runs its scalar kernels). Call at most once,
  // at start (a second call would export a second build_info series).
  void SetBuildInfo(const backends::RuntimeInfo& info);

  // Sets where engine stats come from (replaces any previous source).
  void SetEngineStatsSource(EngineStatsSource source);

  // Everything this object exports (for an Exposer or a test).
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables() const;
  // The text exposition format of all metrics, as /metrics serves it.
  std::string SerializeText() const override;

 private:
  class EngineCollector;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<EngineCollector> engine_collector_;
  std::shared_ptr<server::ProcessCollector> process_collector_;

  prometheus::Family<prometheus::Gauge>& build_info_;
  prometheus::Family<prometheus::Gauge>& degraded_path_;
  prometheus::Family<prometheus::Counter>& rpc_requests_;
  prometheus::Family<prometheus::Counter>& http_responses_;
  prometheus::Gauge& http_connections_;
  prometheus::Family<prometheus::Counter>& finished_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Family<prometheus::Counter>& cached_tokens_;
  prometheus::Counter& cached_tokens_local_;
  prometheus::Counter& cached_tokens_remote_;
  prometheus::Counter& computed_tokens_;
  prometheus::Counter& generated_tokens_;
  prometheus::Histogram& time_to_first_token_;
  prometheus::Histogram& inter_token_latency_;
  prometheus::Histogram& e2e_latency_;
  prometheus::Histogram& queue_time_;
  prometheus::Histogram& prefill_time_;
};

// Name of a finish reason as used in labels ("stop", "stop_string", "length",
// "cancelled", "deadline", "error").
std::string FinishReasonLabel(engine::FinishReason reason);

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_METRICS_H_
