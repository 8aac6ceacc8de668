// Summary statistics of repeated measurements.
#ifndef KVSERVE_BENCH_STATS_H_
#define KVSERVE_BENCH_STATS_H_

#include <span>

namespace kvserve::bench {

struct Summary {
  int count = 0;
  double median = 0.0;  // middle value; the mean of the two middle values for an even count
  double min = 0.0;
  double max = 0.0;
  double mean = 0.0;
};

// Summarises `samples` (any order). All fields are 0 for an empty span.
Summary Summarize(std::span<const double> samples);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_STATS_H_
