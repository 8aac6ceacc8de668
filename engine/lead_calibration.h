// How often a draft model's tokens are accepted, by the draft's confidence in them: the
// lead of the token's logit over the runner-up's (the log of their probability ratio).
// Near-ties are where a quantized draft and its target part ways, but what counts as
// near is the model's (docs/performance.md, "the confidence stop"), so the acceptance
// per lead is learnt from the outcomes of the draft's own proposals.
#ifndef KVSERVE_ENGINE_LEAD_CALIBRATION_H_
#define KVSERVE_ENGINE_LEAD_CALIBRATION_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace kvserve::engine {

// Threading: not thread-safe (the engine's step thread).
class LeadCalibration {
 public:
  // Leads fall into bins [0, 2^-10), [2^-10, 2^-9), ..., [2^5, 2^6), [2^6, inf).
  static constexpr int kBins = 18;
  // A bin's counts are halved when it has seen this many outcomes, so it follows a
  // change (another model, other text) within a few hundred drafts.
  static constexpr double kMaxSeen = 256.0;

  static int BinOf(float lead);

  // A draft token with this lead was accepted (or not).
  void Record(float lead, bool accepted);
  // The chance that a draft token with this lead is accepted: its bin's acceptance, with
  // two outcomes' worth of the overall acceptance mixed in (so a bin seen rarely or never
  // gets about the overall figure; 1 before any outcome).
  double Estimate(float lead) const;
  // Outcomes recorded in `lead`'s bin (after halvings), for tests and logs.
  double seen(float lead) const { return bins_[static_cast<size_t>(BinOf(lead))].seen; }

 private:
  struct Bin {
    double accepted = 0.0;
    double seen = 0.0;
  };
  std::array<Bin, kBins> bins_;
  Bin all_;
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_LEAD_CALIBRATION_H_
