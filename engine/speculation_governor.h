// Whether drafts pay, measured: speculative decoding wins where a step is bound by
// reading the weights (a few sequences on a model larger than the caches) and loses
// where every row costs compute (large batches, tiny models). The governor measures
// both choices and keeps the faster one, separately for each size of the decode batch.
#ifndef KVSERVE_ENGINE_SPECULATION_GOVERNOR_H_
#define KVSERVE_ENGINE_SPECULATION_GOVERNOR_H_

#include <array>
#include <cstdint>

namespace kvserve::engine {

// Per class of decode batch size (1, 2-3, 4-7, 8-15, ...): the smoothed tokens per
// second of decode-only steps with drafts and without. ShouldSpeculate answers "with"
// until each choice has kMinSamples measurements, then the faster one, except every
// explore_every-th step of the class, which takes the other choice so that a change
// (acceptance, load, machine) is noticed. Steps with prompt chunks are not measured.
// Threading: the engine's step thread only.
class SpeculationGovernor {
 public:
  static constexpr int kMinSamples = 4;
  // explore_every >= 2 (smaller values are raised to 2).
  explicit SpeculationGovernor(int32_t explore_every);

  // Whether the next step, with `decoding` (>= 1) sequences decoding, should carry drafts.
  bool ShouldSpeculate(int32_t decoding);
  // A decode-only step of `decoding` sequences emitted `tokens` in `seconds`; `speculated`
  // when it verified at least one draft.
  void Record(int32_t decoding, bool speculated, int64_t tokens, double seconds);

  // The smoothed tokens/s of a class (tests, logs); 0 while unmeasured.
  double rate(int32_t decoding, bool speculated) const;

 private:
  struct Class {
    std::array<double, 2> rate = {0.0, 0.0};  // [without, with] tokens/s
    std::array<int64_t, 2> samples = {0, 0};
    int64_t steps = 0;
  };
  static int ClassOf(int32_t decoding);

  int32_t explore_every_;
  std::array<Class, 12> classes_;
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_SPECULATION_GOVERNOR_H_
