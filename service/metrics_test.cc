#include "service/metrics.h"

#include <initializer_list>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace kvserve::service {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Every one of `parts` appears in `text`.
void ExpectAll(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* part : parts) EXPECT_THAT(text, HasSubstr(part));
}

TEST(MetricsTest, RecordsGenerationsAndRpcs) {
  Metrics metrics;
  const engine::Usage usage{.prompt_tokens = 12,
                            .cached_tokens = 8,
                            .cached_tokens_remote = 0,
                            .computed_tokens = 4,
                            .completion_tokens = 5,
                            .queue_time = absl::Milliseconds(2),
                            .time_to_first_token = absl::Milliseconds(30),
                            .total_time = absl::Milliseconds(90)};
  metrics.RecordGeneration(engine::FinishReason::kLength, usage);
  metrics.RecordInterTokenLatency(absl::Milliseconds(3));
  metrics.RecordRpc(kGrpc, "Generate", "ok");
  const std::string text = metrics.SerializeText();
  ExpectAll(text,
            {"kvserve_request_generated_tokens_total 5", "kvserve_request_prompt_tokens_total 12",
             "kvserve_request_cached_tokens_total{source=\"local\"} 8",
             "kvserve_request_cached_tokens_total{source=\"remote\"} 0",
             "kvserve_request_computed_tokens_total 4",
             "kvserve_request_finished_total{reason=\"length\"} 1",
             "kvserve_rpc_requests_total{code=\"ok\",method=\"Generate\",protocol=\"grpc\"} 1",
             "kvserve_request_time_to_first_token_seconds_count 1",
             "kvserve_request_time_to_first_token_seconds_bucket{le=\"0.05\"} 1",
             "kvserve_request_time_to_first_token_seconds_bucket{le=\"0.025\"} 0",
             "kvserve_request_inter_token_latency_seconds_count 1",
             "kvserve_request_prefill_time_seconds_sum 0.028"});
  // No engine attached: no engine gauges.
  EXPECT_THAT(text, Not(HasSubstr("kvserve_kv_blocks_free")));
}

TEST(MetricsTest, BuildInfoAndDegradedPaths) {
  Metrics metrics;
  EXPECT_THAT(metrics.SerializeText(), Not(HasSubstr("kvserve_build_info{")));
  metrics.SetBuildInfo({.version = "1.2.3",
                        .commit = "abc",
                        .backend = "cpu_blas",
                        .kernel_level = "avx2",
                        .blas_core = "Prescott",
                        .blas_config = "OpenBLAS 0.3.21",
                        .blas_reason = "",
                        .blas_core_degraded = true,
                        .kernels_degraded = false});
  ExpectAll(metrics.SerializeText(),
            {"kvserve_build_info{backend=\"cpu_blas\",blas_core=\"Prescott\",commit=\"abc\","
             "kernel_level=\"avx2\",version=\"1.2.3\"} 1",
             "kvserve_degraded_path{path=\"blas_core\"} 1",
             "kvserve_degraded_path{path=\"simd_kernels\"} 0"});

  Metrics fine;
  fine.SetBuildInfo({.backend = "cpu_blas", .kernel_level = "scalar", .kernels_degraded = true});
  ExpectAll(fine.SerializeText(), {"kvserve_degraded_path{path=\"blas_core\"} 0",
                                   "kvserve_degraded_path{path=\"simd_kernels\"} 1"});
}

TEST(MetricsTest, NoTokenMeansNoTtftObservation) {
  Metrics metrics;
  engine::Usage usage;
  usage.total_time = absl::Milliseconds(5);
  metrics.RecordGeneration(engine::FinishReason::kCancelled, usage);
  const std::string text = metrics.SerializeText();
  ExpectAll(text, {"kvserve_request_time_to_first_token_seconds_count 0",
                   "kvserve_request_e2e_latency_seconds_count 1",
                   "kvserve_request_finished_total{reason=\"cancelled\"} 1"});
  // Every finish reason is exported from the start.
  EXPECT_THAT(text, HasSubstr("kvserve_request_finished_total{reason=\"deadline\"} 0"));
}

TEST(MetricsTest, EngineStatsAreReadAtScrapeTime) {
  Metrics metrics;
  engine::EngineStats stats{.running = 3,
                            .waiting = 2,
                            .blocks_total = 400,
                            .blocks_used = 250,
                            .blocks_cached = 50,
                            .blocks_free = 100,
                            .prefix_queries_total = 11,
                            .prefix_hits_total = 7,
                            .evictions_total = 13,
                            .session_blocks = 17,
                            .session_reclaims_total = 19,
                            .preemptions_total = 23,
                            .steps_total = 29,
                            .open_sessions = 4,
                            .last_step_seconds = 0.5};
  metrics.SetEngineStatsSource([&stats]() { return std::optional<engine::EngineStats>(stats); });
  std::string text = metrics.SerializeText();
  // Every engine metric, each a whole line.
  ExpectAll(text, {"\nkvserve_engine_requests_running 3\n", "\nkvserve_engine_requests_waiting 2\n",
                   "\nkvserve_kv_blocks_total 400\n", "\nkvserve_kv_blocks_used 250\n",
                   "\nkvserve_kv_blocks_cached 50\n", "\nkvserve_kv_blocks_free 100\n",
                   "\nkvserve_prefix_cache_queries_total 11\n",
                   "\nkvserve_prefix_cache_hits_total 7\n", "\nkvserve_kv_evictions_total 13\n",
                   "\nkvserve_kv_blocks_session 17\n", "\nkvserve_sessions_kv_reclaimed_total 19\n",
                   "\nkvserve_engine_preemptions_total 23\n", "\nkvserve_engine_steps_total 29\n",
                   "\nkvserve_sessions_open 4\n", "\nkvserve_engine_last_step_seconds 0.5\n",
                   "# TYPE kvserve_prefix_cache_hits_total counter"});
  stats.running = 0;  // read again at the next scrape
  text = metrics.SerializeText();
  EXPECT_THAT(text, HasSubstr("kvserve_engine_requests_running 0"));
}

// Speculative decoding's families appear only with a draft source: counters and the
// accepted-length histogram (cumulative buckets per length), labelled by source.
TEST(MetricsTest, SpeculativeStatsWhenEnabled) {
  Metrics metrics;
  engine::EngineStats stats;
  metrics.SetEngineStatsSource([&stats]() { return std::optional<engine::EngineStats>(stats); });
  EXPECT_THAT(metrics.SerializeText(), Not(HasSubstr("kvserve_speculative")));
  stats.speculative = engine::SpeculativeStats{.source = "ngram",
                                               .verifications_total = 6,
                                               .draft_tokens_total = 20,
                                               .accepted_tokens_total = 7,
                                               .accepted_length_counts = {3, 1, 0, 2}};
  const std::string text = metrics.SerializeText();
  ExpectAll(text,
            {"\nkvserve_speculative_draft_tokens_total{source=\"ngram\"} 20\n",
             "\nkvserve_speculative_accepted_tokens_total{source=\"ngram\"} 7\n",
             "\nkvserve_speculative_verifications_total{source=\"ngram\"} 6\n",
             "kvserve_speculative_accepted_length_tokens_bucket{source=\"ngram\",le=\"0\"} 3\n",
             "kvserve_speculative_accepted_length_tokens_bucket{source=\"ngram\",le=\"1\"} 4\n",
             "kvserve_speculative_accepted_length_tokens_bucket{source=\"ngram\",le=\"3\"} 6\n",
             "kvserve_speculative_accepted_length_tokens_bucket{source=\"ngram\",le=\"+Inf\"} 6\n",
             "kvserve_speculative_accepted_length_tokens_sum{source=\"ngram\"} 7\n",
             "kvserve_speculative_accepted_length_tokens_count{source=\"ngram\"} 6\n"});
}

// The session cache families appear only with a session cache, with their values.
TEST(MetricsTest, SessionCacheStatsWhenConfigured) {
  Metrics metrics;
  engine::EngineStats stats;
  metrics.SetEngineStatsSource([&stats]() { return std::optional<engine::EngineStats>(stats); });
  EXPECT_THAT(metrics.SerializeText(), Not(HasSubstr("kvserve_session_cache")));
  stats.remote = engine::RemoteCacheStats{.enabled = true,
                                          .failing = true,
                                          .lookups_total = 3,
                                          .lookup_blocks_total = 40,
                                          .fetches_skipped_total = 1,
                                          .fetched_blocks_total = 30,
                                          .fetched_bytes_total = 3000,
                                          .fetch_seconds_total = 0.25,
                                          .rejected_blocks_total = 2,
                                          .rejected_by_reason = {{"bad_checksum", 2}},
                                          .stored_blocks_total = 5,
                                          .stored_bytes_total = 500,
                                          .store_dropped_total = 6,
                                          .errors_total = 7,
                                          .sessions_restored_total = 8,
                                          .sessions_refreshed_total = 9,
                                          .session_commits_total = 10,
                                          .session_conflicts_total = 11};
  ExpectAll(metrics.SerializeText(),
            {"\nkvserve_session_cache_up 0\n", "\nkvserve_session_cache_lookups_total 3\n",
             "\nkvserve_session_cache_lookup_blocks_total 40\n",
             "\nkvserve_session_cache_fetches_skipped_total 1\n",
             "\nkvserve_session_cache_fetched_blocks_total 30\n",
             "\nkvserve_session_cache_fetched_bytes_total 3000\n",
             "\nkvserve_session_cache_fetch_seconds_total 0.25\n",
             "\nkvserve_session_cache_rejected_blocks_total{reason=\"bad_checksum\"} 2\n",
             "\nkvserve_session_cache_stored_blocks_total 5\n",
             "\nkvserve_session_cache_stored_bytes_total 500\n",
             "\nkvserve_session_cache_store_dropped_total 6\n",
             "\nkvserve_session_cache_errors_total 7\n",
             "\nkvserve_session_cache_sessions_restored_total 8\n",
             "\nkvserve_session_cache_sessions_refreshed_total 9\n",
             "\nkvserve_session_cache_session_commits_total 10\n",
             "\nkvserve_session_cache_session_conflicts_total 11\n"});
}

TEST(MetricsTest, EndToEndLatencyBucketsReachAnHour) {
  Metrics metrics;
  engine::Usage usage;
  usage.completion_tokens = 1;
  usage.total_time = absl::Seconds(200);
  metrics.RecordGeneration(engine::FinishReason::kLength, usage);
  ExpectAll(metrics.SerializeText(), {"kvserve_request_e2e_latency_seconds_bucket{le=\"120\"} 0",
                                      "kvserve_request_e2e_latency_seconds_bucket{le=\"300\"} 1",
                                      "kvserve_request_e2e_latency_seconds_bucket{le=\"3600\"} 1"});
}

// Dashboards and alert rules see every series from the start: after SetBuildInfo (which the
// server calls at start) every registered family has its samples, labelled counters one
// at 0 for each known label value.
TEST(MetricsTest, EveryFamilyHasItsSeriesFromTheStart) {
  Metrics metrics;
  metrics.SetBuildInfo({.backend = "cpu_blas"});
  for (const std::weak_ptr<prometheus::Collectable>& collectable : metrics.collectables()) {
    for (const prometheus::MetricFamily& family : collectable.lock()->Collect()) {
      EXPECT_FALSE(family.metric.empty()) << family.name;
    }
  }
  ExpectAll(
      metrics.SerializeText(),
      {"kvserve_rpc_requests_total{code=\"ok\",method=\"Generate\",protocol=\"grpc\"} 0",
       "kvserve_rpc_requests_total{code=\"resource_exhausted\",method=\"GenerateStream\","
       "protocol=\"grpc\"} 0",
       "kvserve_rpc_requests_total{code=\"unauthenticated\",method=\"GetSession\","
       "protocol=\"grpc\"} 0",
       "kvserve_rpc_requests_total{code=\"cancelled\",method=\"Tokenize\",protocol=\"grpc\"} 0",
       "kvserve_rpc_requests_total{code=\"cancelled\",method=\"chat.completions\","
       "protocol=\"http\"} 0",
       "kvserve_rpc_requests_total{code=\"ok\",method=\"models\",protocol=\"http\"} 0",
       "kvserve_request_finished_total{reason=\"stop\"} 0",
       "kvserve_request_cached_tokens_total{source=\"remote\"} 0"});
}

TEST(MetricsTest, ExportsProcessMetrics) {
  Metrics metrics;
  ExpectAll(
      metrics.SerializeText(),
      {"# TYPE process_resident_memory_bytes gauge", "# TYPE process_cpu_seconds_total counter",
       "# TYPE process_open_fds gauge", "# TYPE process_start_time_seconds gauge"});
}

}  // namespace
}  // namespace kvserve::service
