// When a failed call is tried again, and after how long: exponential backoff with
// jitter on UNAVAILABLE, the server's retry hint on RESOURCE_EXHAUSTED (and on
// UNAVAILABLE when it sends one), and a retry budget so that a failing fleet is not
// hammered by every client's retries at once (gRPC's retry throttling: a token bucket
// that failures drain and successes refill; retries stop while it is at most half full).
//
// Pure decisions, no sleeping: the caller sleeps the returned delay. The random source is
// injected, so tests see exact delays.
//
// Threading: thread-safe (the budget is shared by every call of a Client).
#ifndef KVSERVE_CLIENT_RETRY_POLICY_H_
#define KVSERVE_CLIENT_RETRY_POLICY_H_

#include <functional>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace kvserve::client {

class RetryPolicy {
 public:
  struct Options {
    // Attempts per call, the first included; 1 = never retry. Default 4.
    int max_attempts = 4;
    // Backoff before the second attempt; each later one is `multiplier` times longer, up
    // to max_backoff. Defaults 100 ms, x2, 5 s.
    absl::Duration initial_backoff = absl::Milliseconds(100);
    double multiplier = 2.0;
    absl::Duration max_backoff = absl::Seconds(5);
    // Each backoff is multiplied by a uniform factor in [1 - jitter, 1 + jitter], so
    // clients that failed together do not retry together. In [0, 1]. Default 0.2.
    double jitter = 0.2;
    // A server hint longer than this is not waited for (the call fails). Default 30 s.
    absl::Duration max_retry_hint = absl::Seconds(30);
    // Retry budget: a bucket of budget_max_tokens tokens, full at start; every failure
    // that could be retried takes one, every success gives back budget_token_ratio;
    // retries are allowed only while more than half of the bucket is left. 0 tokens =
    // no budget (retries limited by max_attempts only). Defaults 10 and 0.1 (after a
    // burst of failures, about one retry per ten successes).
    double budget_max_tokens = 10.0;
    double budget_token_ratio = 0.1;
  };

  // INVALID_ARGUMENT naming the field for out-of-range options.
  static absl::Status Validate(const Options& options);

  // `uniform` returns numbers uniform in [0, 1) (called under no lock, maybe from several
  // threads at once: it must be thread-safe). Options must be valid.
  RetryPolicy(Options options, std::function<double()> uniform);

  // The code of a call's failure that a retry may fix: UNAVAILABLE always;
  // RESOURCE_EXHAUSTED only with a server hint (without one it is a limit, not
  // overload); ABORTED only with a server hint (kvserve's busy session: another turn of
  // it runs, or the turn's record lost a race; the turn was not recorded either way).
  static bool Retryable(const absl::Status& status, bool has_hint);

  // Attempt number `attempt` (1 = the first) failed with `status`; the server sent
  // `hint` (grpc-retry-pushback-ms) or nothing. Returns the delay before the next attempt,
  // or nullopt to give up: the status is not retryable, attempts are used up, the budget
  // is spent, or the delay would not end before `remaining` (the call's time left).
  // The delay is the hint when there is one (the server knows best), else the jittered
  // backoff of this attempt. Takes a budget token for every retryable failure.
  std::optional<absl::Duration> OnFailure(const absl::Status& status,
                                          std::optional<absl::Duration> hint, int attempt,
                                          absl::Duration remaining);
  // A call succeeded: gives budget_token_ratio back to the budget.
  void OnSuccess();

  // Backoff before attempt `attempt + 1`, without jitter.
  absl::Duration Backoff(int attempt) const;
  // Tokens left in the budget.
  double budget_tokens() const;

 private:
  const Options options_;
  const std::function<double()> uniform_;
  mutable std::mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::client

#endif  // KVSERVE_CLIENT_RETRY_POLICY_H_
