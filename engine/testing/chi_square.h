// Chi-square tests for the sampler's and the engine's statistical tests: two samples
// drawn from one distribution, or not.
#ifndef KVSERVE_ENGINE_TESTING_CHI_SQUARE_H_
#define KVSERVE_ENGINE_TESTING_CHI_SQUARE_H_

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace kvserve::engine::testing {

// Two-sample chi-square of equal-size samples a and b (outcome -> count) over the
// outcomes either drew: sum (a_i - b_i)^2 / (a_i + b_i), with (outcomes - 1) degrees
// of freedom in *dof.
template <typename Outcome>
double TwoSampleChiSquare(const std::map<Outcome, int>& a, const std::map<Outcome, int>& b,
                          int* dof) {
  std::set<Outcome> outcomes;
  for (const auto& [o, n] : a) outcomes.insert(o);
  for (const auto& [o, n] : b) outcomes.insert(o);
  double chi2 = 0.0;
  for (const Outcome& o : outcomes) {
    const double x = a.contains(o) ? a.at(o) : 0.0;
    const double y = b.contains(o) ? b.at(o) : 0.0;
    chi2 += (x - y) * (x - y) / (x + y);
  }
  *dof = static_cast<int>(outcomes.size()) - 1;
  return chi2;
}

// The chi-square value exceeded with probability 0.001 (Wilson-Hilferty).
inline double ChiSquareBound(int dof) {
  const double d = std::max(dof, 1);
  const double z = 3.09;
  const double c = 1.0 - 2.0 / (9.0 * d) + z * std::sqrt(2.0 / (9.0 * d));
  return d * c * c * c;
}

}  // namespace kvserve::engine::testing

#endif  // KVSERVE_ENGINE_TESTING_CHI_SQUARE_H_
