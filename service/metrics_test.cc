#include "service/metrics.h"

#include <initializer_list>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
  metrics.RecordRpc("Generate", "ok");
  const std::string text = metrics.SerializeText();
  ExpectAll(text,
            {"kvserve_request_generated_tokens_total 5", "kvserve_request_prompt_tokens_total 12",
             "kvserve_request_cached_tokens_total{source=\"local\"} 8",
             "kvserve_request_cached_tokens_total{source=\"remote\"} 0",
             "kvserve_request_computed_tokens_total 4",
             "kvserve_request_finished_total{reason=\"length\"} 1",
             "kvserve_rpc_requests_total{code=\"ok\",method=\"Generate\"} 1",
             "kvserve_request_time_to_first_token_seconds_count 1",
             "kvserve_request_time_to_first_token_seconds_bucket{le=\"0.05\"} 1",
             "kvserve_request_time_to_first_token_seconds_bucket{le=\"0.025\"} 0",
             "kvserve_request_inter_token_latency_seconds_count 1",
             "kvserve_request_prefill_time_seconds_sum 0.028"});
  // No engine attached: no engine gauges.
  EXPECT_THAT(text, Not(HasSubstr("kvserve_kv_blocks_free")));
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
  engine::EngineStats stats{
      .running = 3, .waiting = 2, .blocks_free = 100, .prefix_hits_total = 7, .open_sessions = 4};
  metrics.SetEngineStatsSource([&stats]() { return std::optional<engine::EngineStats>(stats); });
  std::string text = metrics.SerializeText();
  ExpectAll(text, {"kvserve_engine_requests_running 3", "kvserve_engine_requests_waiting 2",
                   "kvserve_kv_blocks_free 100", "kvserve_prefix_cache_hits_total 7",
                   "# TYPE kvserve_prefix_cache_hits_total counter", "kvserve_sessions_open 4"});
  stats.running = 0;  // read again at the next scrape
  text = metrics.SerializeText();
  EXPECT_THAT(text, HasSubstr("kvserve_engine_requests_running 0"));
}

}  // namespace
}  // namespace kvserve::service
