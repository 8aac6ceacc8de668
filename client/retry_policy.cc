#include "client/retry_policy.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kvserve::client {

absl::Status RetryPolicy::Validate(const Options& o) {
  if (o.max_attempts < 1) return absl::InvalidArgumentError("retry max_attempts must be >= 1");
  if (o.initial_backoff < absl::ZeroDuration() || o.max_backoff < o.initial_backoff) {
    return absl::InvalidArgumentError("retry backoff must satisfy 0 <= initial <= max");
  }
  if (!(o.multiplier >= 1.0) || !std::isfinite(o.multiplier)) {
    return absl::InvalidArgumentError("retry multiplier must be >= 1");
  }
  if (!(o.jitter >= 0.0 && o.jitter <= 1.0)) {
    return absl::InvalidArgumentError("retry jitter must be in [0, 1]");
  }
  if (o.max_retry_hint < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("retry max_retry_hint must be >= 0");
  }
  if (!(o.budget_max_tokens >= 0.0) || !(o.budget_token_ratio >= 0.0)) {
    return absl::InvalidArgumentError("retry budget tokens and ratio must be >= 0");
  }
  return absl::OkStatus();
}

RetryPolicy::RetryPolicy(Options options, std::function<double()> uniform)
    : options_(options), uniform_(std::move(uniform)), tokens_(options.budget_max_tokens) {}

bool RetryPolicy::Retryable(const absl::Status& status, bool has_hint) {
  return absl::IsUnavailable(status) ||
         ((absl::IsResourceExhausted(status) || absl::IsAborted(status)) && has_hint);
}

absl::Duration RetryPolicy::Backoff(int attempt) const {
  absl::Duration backoff = options_.initial_backoff;
  for (int i = 1; i < attempt && backoff < options_.max_backoff; ++i) {
    backoff *= options_.multiplier;
  }
  return std::min(backoff, options_.max_backoff);
}

std::optional<absl::Duration> RetryPolicy::OnFailure(const absl::Status& status,
                                                     std::optional<absl::Duration> hint,
                                                     int attempt, absl::Duration remaining) {
  if (!Retryable(status, hint.has_value())) return std::nullopt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.budget_max_tokens > 0.0) {
      tokens_ = std::max(0.0, tokens_ - 1.0);
      if (tokens_ <= options_.budget_max_tokens / 2) return std::nullopt;
    }
  }
  if (attempt >= options_.max_attempts) return std::nullopt;
  absl::Duration delay;
  if (hint.has_value()) {
    if (*hint > options_.max_retry_hint) return std::nullopt;
    delay = std::max(*hint, absl::ZeroDuration());
  } else {
    const double factor = 1.0 + options_.jitter * (2.0 * uniform_() - 1.0);
    delay = Backoff(attempt) * factor;
  }
  if (delay >= remaining) return std::nullopt;
  return delay;
}

void RetryPolicy::OnSuccess() {
  std::lock_guard<std::mutex> lock(mu_);
  tokens_ = std::min(options_.budget_max_tokens, tokens_ + options_.budget_token_ratio);
}

double RetryPolicy::budget_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_;
}

}  // namespace kvserve::client
