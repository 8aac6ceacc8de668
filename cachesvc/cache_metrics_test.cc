#include "cachesvc/cache_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::cachesvc {
namespace {

using ::testing::HasSubstr;

// kvserve-cache exports the same process_* families as kvserve (one ProcessCollector).
TEST(CacheMetricsTest, ExportsProcessMetrics) {
  CacheMetrics metrics;
  const std::string text = metrics.SerializeText();
  for (const char* line :
       {"# TYPE process_resident_memory_bytes gauge", "# TYPE process_cpu_seconds_total counter",
        "# TYPE process_open_fds gauge", "# TYPE process_start_time_seconds gauge"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

TEST(CacheMetricsTest, EveryRejectionReasonIsExportedFromTheStart) {
  CacheMetrics metrics;
  const std::string text = metrics.SerializeText();
  EXPECT_THAT(text, HasSubstr("kvserve_cache_rejected_blocks_total{reason=\"truncated\"} 0"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("reason=\"ok\"")));
  metrics.RecordRejected("truncated");
  EXPECT_THAT(metrics.SerializeText(),
              HasSubstr("kvserve_cache_rejected_blocks_total{reason=\"truncated\"} 1"));
  EXPECT_EQ(metrics.totals().rejected_blocks, 1);
}

}  // namespace
}  // namespace kvserve::cachesvc
