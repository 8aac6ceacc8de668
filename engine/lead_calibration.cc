#include "engine/lead_calibration.h"

#include <algorithm>
#include <cmath>

namespace kvserve::engine {

int LeadCalibration::BinOf(float lead) {
  if (!(lead >= 0x1p-10f)) return 0;  // also NaN
  int exponent = 0;
  std::frexp(lead, &exponent);  // lead in [2^(exponent-1), 2^exponent)
  return std::clamp(exponent + 10, 1, kBins - 1);
}

void LeadCalibration::Record(float lead, bool accepted) {
  for (Bin* b : {&bins_[static_cast<size_t>(BinOf(lead))], &all_}) {
    if (b->seen >= kMaxSeen) {
      b->seen /= 2;
      b->accepted /= 2;
    }
    b->seen += 1.0;
    b->accepted += accepted ? 1.0 : 0.0;
  }
}

double LeadCalibration::Estimate(float lead) const {
  constexpr double kPrior = 2.0;  // outcomes' worth of the overall acceptance
  const double overall = (all_.accepted + 1.0) / (all_.seen + 1.0);
  const Bin& b = bins_[static_cast<size_t>(BinOf(lead))];
  return (b.accepted + kPrior * overall) / (b.seen + kPrior);
}

}  // namespace kvserve::engine
