// Measures the machine's memory read bandwidth, the limit batch-1 decode runs against.
#ifndef KVSERVE_BENCH_BANDWIDTH_H_
#define KVSERVE_BENCH_BANDWIDTH_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace kvserve::bench {

struct BandwidthOptions {
  // Reader threads, each streaming its own slice of the buffer. Default 2.
  int threads = 2;
  // Buffer size; must be much larger than the last-level cache. Default 1 GiB.
  size_t buffer_bytes = size_t{1} << 30;
  // Each thread reads this many regions of its slice at once (more streams keep more
  // prefetchers busy; one stream per thread under-reports). Default 4.
  int streams_per_thread = 4;
  // Full passes over the buffer; the best counts. Default 5.
  int passes = 5;
};

struct BandwidthResult {
  double best_gbs = 0.0;    // 1e9 bytes per second, fastest pass
  double median_gbs = 0.0;  // median pass
  double worst_gbs = 0.0;   // slowest pass
  std::string kernel;       // "avx512", "avx2" or "scalar": the widest loads the CPU has
};

// Reads the whole buffer `passes` times with wide vector loads, all threads at once,
// and reports the bytes read per wall-clock second. INVALID_ARGUMENT for a
// non-positive count or a buffer smaller than 64 KiB per stream; RESOURCE_EXHAUSTED
// when the buffer cannot be allocated. Takes about passes * buffer / bandwidth
// seconds plus the time to fill the buffer once.
absl::StatusOr<BandwidthResult> MeasureReadBandwidth(const BandwidthOptions& options);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_BANDWIDTH_H_
