#include "bench/bandwidth.h"

#include "gtest/gtest.h"

namespace kvserve::bench {
namespace {

TEST(BandwidthTest, SmallProbeReportsAPlausibleRate) {
  BandwidthOptions o;
  o.threads = 2;
  o.buffer_bytes = 8 << 20;
  o.passes = 3;
  absl::StatusOr<BandwidthResult> r = MeasureReadBandwidth(o);
  ASSERT_TRUE(r.ok()) << r.status();
  // Between 100 MB/s and 10 TB/s on any machine that runs the suite, even under ASan.
  EXPECT_GT(r->best_gbs, 0.1);
  EXPECT_LT(r->best_gbs, 10000.0);
  EXPECT_LE(r->worst_gbs, r->median_gbs);
  EXPECT_LE(r->median_gbs, r->best_gbs);
  EXPECT_FALSE(r->kernel.empty());
}

TEST(BandwidthTest, RejectsBadOptions) {
  BandwidthOptions o;
  o.threads = 0;
  EXPECT_EQ(MeasureReadBandwidth(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.threads = 2;
  o.buffer_bytes = 4096;  // far below 64 KiB per stream
  EXPECT_EQ(MeasureReadBandwidth(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.buffer_bytes = 8 << 20;
  o.passes = 0;
  EXPECT_EQ(MeasureReadBandwidth(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::bench
