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

}  // namespace
}  // namespace kvserve::cachesvc
