// What kvserve-cli bench sends and when: the units of work (a request, or a multi-turn
// conversation over a shared system prompt), their prompts, and their arrival times
// (back to back, or Poisson arrivals at a given rate).
#ifndef KVSERVE_CLIENT_BENCH_WORKLOAD_H_
#define KVSERVE_CLIENT_BENCH_WORKLOAD_H_

#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace kvserve::client::bench {

struct WorkloadOptions {
  // "single": every unit is one request with `prompt`. "conversation": every unit is a
  // session of `turns` turns; the first turn is `system_prompt` and a user line, each
  // later turn a new user line (the lines differ between conversations, the system prompt
  // is shared: its KV is what the prefix cache can reuse). Default "single".
  std::string shape = "single";
  std::string prompt = "Once upon a time";
  // Prompts to draw from, uniformly (seeded by `seed`): when not empty, a "single" unit
  // sends a drawn prompt instead of `prompt`, and a conversation's first turn is a drawn
  // prompt instead of `system_prompt` and a user line (conversations then share whole
  // first turns: their greedy answers can be compared). Default empty.
  std::vector<std::string> prompts;
  std::string system_prompt =
      "You are a storyteller. You tell short, happy stories about children and animals.";
  // Turns per conversation, >= 1. Default 3.
  int turns = 3;
  // Requests to send in all (conversations hold `turns` of them; the last may be
  // shorter); 0 = no count limit (then `duration` must be set). Default 16.
  int64_t requests = 16;
  // Stop starting units after this long; 0 = no time limit. Default 0.
  absl::Duration duration = absl::ZeroDuration();
  // Units started per second with exponential gaps (Poisson arrivals); 0 = each worker
  // starts its next unit when the previous one ended (closed loop). Default 0.
  double request_rate = 0;
  // Seed of the arrival times and of the draws (prompts, Unit::seed). Default 1.
  uint64_t seed = 1;
};

// INVALID_ARGUMENT naming the option when `options` cannot run.
absl::Status ValidateWorkload(const WorkloadOptions& options);

// One unit of work: `turns` requests (1 for shape "single").
struct Unit {
  int64_t index = 0;
  int turns = 1;
  absl::Time arrival;  // when it should start
  int prompt = -1;     // index into WorkloadOptions::prompts; -1 when there are none
  uint64_t seed = 0;   // for the runner's own per-request draws (e.g. max_tokens)
};

// The text of turn `turn` (0-based) of `unit`.
std::string TurnText(const WorkloadOptions& options, const Unit& unit, int turn);

// Hands out units in order to worker threads, each at its arrival time. Thread-safe.
class UnitSource {
 public:
  UnitSource(const WorkloadOptions& options, absl::Time start);
  // The next unit, or nullopt when the count or the duration is used up. Does not wait:
  // the caller sleeps until unit.arrival.
  std::optional<Unit> Take();
  // Units handed out so far, and requests in them.
  int64_t units_taken() const;

 private:
  const WorkloadOptions options_;
  const absl::Time start_;
  mutable std::mutex mu_;
  int64_t next_unit_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t requests_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_arrival_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);       // arrival gaps
  std::mt19937_64 draw_rng_ ABSL_GUARDED_BY(mu_);  // prompts and unit seeds
};

}  // namespace kvserve::client::bench

#endif  // KVSERVE_CLIENT_BENCH_WORKLOAD_H_
