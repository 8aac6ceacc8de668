#include "service/metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::service {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, RecordsGenerationsAndRpcs) {
  Metrics metrics;
  engine::Usage usage;
  usage.prompt_tokens = 12;
  usage.cached_tokens = 8;
  usage.cached_tokens_remote = 0;
  usage.computed_tokens = 4;
  usage.completion_tokens = 5;
  usage.queue_time = absl::Milliseconds(2);
  usage.time_to_first_token = absl::Milliseconds(30);
  usage.total_time = absl::Milliseconds(90);
  metrics.RecordGeneration(engine::FinishReason::kLength, usage);
  metrics.RecordInterTokenLatency(absl::Milliseconds(3));
  metrics.RecordRpc("Generate", "ok");
  const std::string text = metrics.SerializeText();
  EXPECT_THAT(text, HasSubstr("kvserve_request_generated_tokens_total 5"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_prompt_tokens_total 12"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_cached_tokens_total{source=\"local\"} 8"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_cached_tokens_total{source=\"remote\"} 0"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_computed_tokens_total 4"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_finished_total{reason=\"length\"} 1"));
  EXPECT_THAT(text, HasSubstr("kvserve_rpc_requests_total{code=\"ok\",method=\"Generate\"} 1"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_time_to_first_token_seconds_count 1"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_time_to_first_token_seconds_bucket{le=\"0.05\"} 1"));
  EXPECT_THAT(text,
              HasSubstr("kvserve_request_time_to_first_token_seconds_bucket{le=\"0.025\"} 0"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_inter_token_latency_seconds_count 1"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_prefill_time_seconds_sum 0.028"));
  // No engine attached: no engine gauges.
  EXPECT_THAT(text, Not(HasSubstr("kvserve_kv_blocks_free")));
}

TEST(MetricsTest, NoTokenMeansNoTtftObservation) {
  Metrics metrics;
  engine::Usage usage;
  usage.total_time = absl::Milliseconds(5);
  metrics.RecordGeneration(engine::FinishReason::kCancelled, usage);
  const std::string text = metrics.SerializeText();
  EXPECT_THAT(text, HasSubstr("kvserve_request_time_to_first_token_seconds_count 0"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_e2e_latency_seconds_count 1"));
  EXPECT_THAT(text, HasSubstr("kvserve_request_finished_total{reason=\"cancelled\"} 1"));
  // Every finish reason is exported from the start.
  EXPECT_THAT(text, HasSubstr("kvserve_request_finished_total{reason=\"deadline\"} 0"));
}

TEST(MetricsTest, EngineStatsAreReadAtScrapeTime) {
  Metrics metrics;
  engine::EngineStats stats;
  stats.running = 3;
  stats.waiting = 2;
  stats.blocks_total = 400;
  stats.blocks_used = 250;
  stats.blocks_cached = 50;
  stats.blocks_free = 100;
  stats.prefix_queries_total = 11;
  stats.prefix_hits_total = 7;
  stats.evictions_total = 13;
  stats.session_blocks = 17;
  stats.session_reclaims_total = 19;
  stats.preemptions_total = 23;
  stats.steps_total = 29;
  stats.open_sessions = 4;
  stats.last_step_seconds = 0.5;
  metrics.SetEngineStatsSource([&stats]() { return std::optional<engine::EngineStats>(stats); });
  std::string text = metrics.SerializeText();
  for (const char* line :
       {"kvserve_engine_requests_running 3", "kvserve_engine_requests_waiting 2",
        "kvserve_kv_blocks_total 400", "kvserve_kv_blocks_used 250", "kvserve_kv_blocks_cached 50",
        "kvserve_kv_blocks_free 100", "kvserve_prefix_cache_queries_total 11",
        "kvserve_prefix_cache_hits_total 7", "kvserve_kv_evictions_total 13",
        "kvserve_kv_blocks_session 17", "kvserve_sessions_kv_reclaimed_total 19",
        "kvserve_engine_preemptions_total 23", "kvserve_engine_steps_total 29",
        "kvserve_sessions_open 4", "kvserve_engine_last_step_seconds 0.5"}) {
    EXPECT_THAT(text, HasSubstr(std::string("\n") + line + "\n")) << line;
  }
  EXPECT_THAT(text, HasSubstr("# TYPE kvserve_prefix_cache_hits_total counter"));
  EXPECT_THAT(text, HasSubstr("kvserve_sessions_open 4"));
  stats.running = 0;  // read again at the next scrape
  text = metrics.SerializeText();
  EXPECT_THAT(text, HasSubstr("kvserve_engine_requests_running 0"));
}

}  // namespace
}  // namespace kvserve::service
