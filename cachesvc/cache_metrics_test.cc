#include "cachesvc/cache_metrics.h"

#include <sstream>
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

// Dashboards and alert rules see every call series from the start: each method's duration
// and each (method, code) pair at 0, and no family is declared without a sample.
TEST(CacheMetricsTest, EveryCallSeriesIsExportedFromTheStart) {
  CacheMetrics metrics;
  const std::string text = metrics.SerializeText();
  for (const char* series :
       {"kvserve_cache_rpc_requests_total{code=\"OK\",method=\"Lookup\"} 0",
        "kvserve_cache_rpc_requests_total{code=\"UNAVAILABLE\",method=\"StoreBlocks\"} 0",
        "kvserve_cache_rpc_requests_total{code=\"UNAUTHENTICATED\",method=\"GetStats\"} 0",
        "kvserve_cache_rpc_duration_seconds_count{method=\"FetchBlocks\"} 0"}) {
    EXPECT_THAT(text, HasSubstr(series));
  }
  std::istringstream lines(text);
  std::string line;
  std::string declared;  // the family of the last "# TYPE" line, until a sample shows
  while (std::getline(lines, line)) {
    if (line.starts_with("# TYPE ")) {
      EXPECT_EQ(declared, "") << "no sample";
      declared = line.substr(7, line.find(' ', 7) - 7);
    } else if (!line.starts_with("#") && line.starts_with(declared)) {
      declared.clear();
    }
  }
  EXPECT_EQ(declared, "") << "no sample";
}

}  // namespace
}  // namespace kvserve::cachesvc
