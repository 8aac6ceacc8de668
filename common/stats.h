// Summary statistics of repeated measurements, shared by the benchmarks and kvserve-cli's
// bench command: one definition of median and percentile for every figure we print.
#ifndef KVSERVE_COMMON_STATS_H_
#define KVSERVE_COMMON_STATS_H_

#include <span>

namespace kvserve::common {

struct Summary {
  int count = 0;
  double median = 0.0;  // middle value; the mean of the two middle values for an even count
  double min = 0.0;
  double max = 0.0;
  double mean = 0.0;
};

// Summarises `samples` (any order). All fields are 0 for an empty span.
Summary Summarize(std::span<const double> samples);

// The sample at 0-based rank round(p * (n - 1)) of the n samples in ascending order (any
// input order): p = 0 is the minimum, p = 1 the maximum, p = 0.5 the middle value (the
// upper of the two middle values for an even count). `p` outside [0, 1] (or NaN) is
// clamped to it (NaN counts as 0). Returns 0 for an empty span.
double Percentile(std::span<const double> samples, double p);

}  // namespace kvserve::common

#endif  // KVSERVE_COMMON_STATS_H_
