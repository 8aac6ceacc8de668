#include "engine/speculation_governor.h"

#include <algorithm>
#include <bit>

namespace kvserve::engine {
namespace {

// Weight of a new measurement in the smoothed rate: about the last 8 steps count.
constexpr double kSmoothing = 0.125;

}  // namespace

SpeculationGovernor::SpeculationGovernor(int32_t explore_every)
    : explore_every_(std::max(explore_every, 2)) {}

int SpeculationGovernor::ClassOf(int32_t decoding) {
  const int c = static_cast<int>(std::bit_width(static_cast<uint32_t>(std::max(decoding, 1)))) - 1;
  return std::min(c, 11);
}

bool SpeculationGovernor::ShouldSpeculate(int32_t decoding) {
  Class& c = classes_[static_cast<size_t>(ClassOf(decoding))];
  ++c.steps;
  if (c.samples[1] < kMinSamples) return true;
  if (c.samples[0] < kMinSamples) return false;
  const bool faster_with = c.rate[1] > c.rate[0];
  return c.steps % explore_every_ == 0 ? !faster_with : faster_with;
}

void SpeculationGovernor::Record(int32_t decoding, bool speculated, int64_t tokens,
                                 double seconds) {
  if (tokens <= 0 || seconds <= 0.0) return;
  Class& c = classes_[static_cast<size_t>(ClassOf(decoding))];
  const size_t i = speculated ? 1 : 0;
  const double rate = static_cast<double>(tokens) / seconds;
  c.rate[i] = c.samples[i] == 0 ? rate : (1.0 - kSmoothing) * c.rate[i] + kSmoothing * rate;
  ++c.samples[i];
}

double SpeculationGovernor::rate(int32_t decoding, bool speculated) const {
  return classes_[static_cast<size_t>(ClassOf(decoding))].rate[speculated ? 1 : 0];
}

}  // namespace kvserve::engine
