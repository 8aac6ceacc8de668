#include "client/bench_workload.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"

namespace kvserve::client::bench {
namespace {

// User lines of the conversation shape; a conversation picks its own sequence.
constexpr std::array<const char*, 8> kUserLines = {
    "Tell me about a girl and her dog.", "What did they find in the park?",
    "Then it started to rain.",          "Who helped them get home?",
    "What did they eat for dinner?",     "Tell me about a bird that could not fly.",
    "The sun came out again.",           "How did the day end?",
};

}  // namespace

absl::Status ValidateWorkload(const WorkloadOptions& o) {
  if (o.shape != "single" && o.shape != "conversation") {
    return absl::InvalidArgumentError("--shape must be single or conversation");
  }
  if (o.turns < 1) return absl::InvalidArgumentError("--turns must be >= 1");
  if (o.requests < 0) return absl::InvalidArgumentError("--requests must be >= 0");
  if (o.duration < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--duration must be >= 0");
  }
  if (o.requests == 0 && o.duration == absl::ZeroDuration()) {
    return absl::InvalidArgumentError("set --requests or --duration");
  }
  if (!(o.request_rate >= 0)) return absl::InvalidArgumentError("--request_rate must be >= 0");
  return absl::OkStatus();
}

std::string TurnText(const WorkloadOptions& o, const Unit& unit, int turn) {
  const bool drawn = unit.prompt >= 0 && static_cast<size_t>(unit.prompt) < o.prompts.size();
  if (o.shape == "single") return drawn ? o.prompts[static_cast<size_t>(unit.prompt)] : o.prompt;
  const std::string line =
      absl::StrCat(kUserLines[static_cast<size_t>((unit.index * 3 + turn) %
                                                  static_cast<int64_t>(kUserLines.size()))],
                   " (", unit.index, ")");
  if (turn > 0) return absl::StrCat(" ", line);
  return drawn ? o.prompts[static_cast<size_t>(unit.prompt)]
               : absl::StrCat(o.system_prompt, " ", line);
}

UnitSource::UnitSource(const WorkloadOptions& options, absl::Time start)
    : options_(options),
      start_(start),
      next_arrival_(start),
      rng_(options.seed),
      // Its own stream: drawing prompts does not change the arrival times of a seed.
      draw_rng_(options.seed ^ 0x9e3779b97f4a7c15ULL) {}

std::optional<Unit> UnitSource::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  const int per_unit = options_.shape == "single" ? 1 : options_.turns;
  if (options_.requests > 0 && requests_ >= options_.requests) return std::nullopt;
  Unit unit;
  unit.index = next_unit_;
  unit.turns = options_.requests > 0
                   ? static_cast<int>(std::min<int64_t>(per_unit, options_.requests - requests_))
                   : per_unit;
  if (options_.request_rate > 0) {
    if (next_unit_ > 0) {
      std::exponential_distribution<double> gap(options_.request_rate);
      next_arrival_ += absl::Seconds(gap(rng_));
    }
    unit.arrival = next_arrival_;
  } else {
    unit.arrival = absl::InfinitePast();
  }
  if (options_.duration > absl::ZeroDuration()) {
    const absl::Time at = options_.request_rate > 0 ? unit.arrival : absl::Now();
    if (at >= start_ + options_.duration) return std::nullopt;
  }
  if (!options_.prompts.empty()) {
    unit.prompt = static_cast<int>(
        std::uniform_int_distribution<size_t>(0, options_.prompts.size() - 1)(draw_rng_));
  }
  unit.seed = draw_rng_();
  ++next_unit_;
  requests_ += unit.turns;
  return unit;
}

int64_t UnitSource::units_taken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_unit_;
}

}  // namespace kvserve::client::bench
