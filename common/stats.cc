#include "common/stats.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kvserve::common {

Summary Summarize(std::span<const double> samples) {
  Summary s;
  if (samples.empty()) return s;
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  s.count = static_cast<int>(n);
  s.min = sorted.front();
  s.max = sorted.back();
  s.median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
  double sum = 0.0;
  for (double v : sorted) sum += v;
  s.mean = sum / static_cast<double>(n);
  return s;
}

double Percentile(std::span<const double> samples, double p) {
  if (samples.empty()) return 0.0;
  if (!(p > 0.0)) p = 0.0;  // also NaN
  if (p > 1.0) p = 1.0;
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t rank = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(rank, sorted.size() - 1)];
}

}  // namespace kvserve::common
