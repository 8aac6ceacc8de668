// RetryPolicy with a scripted random source: which failures are retried, exact backoffs
// with jitter, the server hint taking precedence, the call's remaining time, and the
// retry budget draining and refilling.
#include "client/retry_policy.h"

#include <optional>

#include "gtest/gtest.h"

namespace kvserve::client {
namespace {

const absl::Status kUnavailable = absl::UnavailableError("down");
const absl::Status kExhausted = absl::ResourceExhaustedError("queue full");
constexpr absl::Duration kLots = absl::Hours(1);

RetryPolicy::Options NoBudget() {
  RetryPolicy::Options o;
  o.budget_max_tokens = 0;
  return o;
}

TEST(RetryPolicyTest, RetriesOnlyUnavailableAndHintedOverload) {
  RetryPolicy policy(NoBudget(), [] { return 0.5; });
  EXPECT_TRUE(policy.OnFailure(kUnavailable, std::nullopt, 1, kLots).has_value());
  EXPECT_TRUE(policy.OnFailure(kExhausted, absl::Milliseconds(300), 1, kLots).has_value());
  // RESOURCE_EXHAUSTED without a hint is a limit (e.g. a message too large).
  EXPECT_FALSE(policy.OnFailure(kExhausted, std::nullopt, 1, kLots).has_value());
  EXPECT_FALSE(policy.OnFailure(absl::InvalidArgumentError("x"), std::nullopt, 1, kLots));
  EXPECT_FALSE(policy.OnFailure(absl::DeadlineExceededError("x"), std::nullopt, 1, kLots));
  EXPECT_FALSE(policy.OnFailure(absl::NotFoundError("x"), absl::Seconds(1), 1, kLots));
}

TEST(RetryPolicyTest, ExponentialBackoffWithJitterAndAttemptLimit) {
  RetryPolicy::Options o = NoBudget();
  o.initial_backoff = absl::Milliseconds(100);
  o.multiplier = 2;
  o.max_backoff = absl::Milliseconds(300);
  o.jitter = 0.2;
  o.max_attempts = 5;
  double u = 0.0;  // the scripted random number
  RetryPolicy policy(o, [&u] { return u; });
  EXPECT_EQ(policy.Backoff(1), absl::Milliseconds(100));
  EXPECT_EQ(policy.Backoff(2), absl::Milliseconds(200));
  EXPECT_EQ(policy.Backoff(3), absl::Milliseconds(300));  // capped
  EXPECT_EQ(policy.Backoff(40), absl::Milliseconds(300));
  u = 0.0;  // factor 0.8
  EXPECT_EQ(policy.OnFailure(kUnavailable, std::nullopt, 1, kLots), absl::Milliseconds(80));
  u = 0.5;  // factor 1
  EXPECT_EQ(policy.OnFailure(kUnavailable, std::nullopt, 2, kLots), absl::Milliseconds(200));
  u = 1.0;  // factor 1.2
  EXPECT_EQ(policy.OnFailure(kUnavailable, std::nullopt, 3, kLots), absl::Milliseconds(360));
  EXPECT_TRUE(policy.OnFailure(kUnavailable, std::nullopt, 4, kLots).has_value());
  EXPECT_FALSE(policy.OnFailure(kUnavailable, std::nullopt, 5, kLots).has_value());
}

TEST(RetryPolicyTest, ServerHintIsTheDelayWithinLimits) {
  RetryPolicy::Options o = NoBudget();
  o.max_retry_hint = absl::Seconds(10);
  RetryPolicy policy(o, [] { return 0.0; });
  EXPECT_EQ(policy.OnFailure(kExhausted, absl::Milliseconds(1500), 1, kLots),
            absl::Milliseconds(1500));
  EXPECT_EQ(policy.OnFailure(kUnavailable, absl::Milliseconds(700), 1, kLots),
            absl::Milliseconds(700));
  // Longer than the client will wait for, or than the call has left: give up.
  EXPECT_FALSE(policy.OnFailure(kExhausted, absl::Seconds(11), 1, kLots).has_value());
  EXPECT_FALSE(
      policy.OnFailure(kExhausted, absl::Seconds(2), 1, absl::Milliseconds(1999)).has_value());
  EXPECT_FALSE(policy.OnFailure(kUnavailable, std::nullopt, 1, absl::Milliseconds(50)).has_value());
}

TEST(RetryPolicyTest, BudgetDrainsOnFailuresAndRefillsOnSuccesses) {
  RetryPolicy::Options o;
  o.budget_max_tokens = 4;
  o.budget_token_ratio = 0.5;
  o.max_attempts = 100;
  RetryPolicy policy(o, [] { return 0.5; });
  EXPECT_TRUE(policy.OnFailure(kUnavailable, std::nullopt, 1, kLots).has_value());   // 3 left
  EXPECT_FALSE(policy.OnFailure(kUnavailable, std::nullopt, 1, kLots).has_value());  // 2: half
  EXPECT_DOUBLE_EQ(policy.budget_tokens(), 2.0);
  // A non-retryable failure does not touch the budget.
  policy.OnFailure(absl::InvalidArgumentError("x"), std::nullopt, 1, kLots);
  EXPECT_DOUBLE_EQ(policy.budget_tokens(), 2.0);
  policy.OnSuccess();
  policy.OnSuccess();
  policy.OnSuccess();                                                               // 3.5
  EXPECT_TRUE(policy.OnFailure(kUnavailable, std::nullopt, 1, kLots).has_value());  // 2.5
  for (int i = 0; i < 20; ++i) policy.OnSuccess();
  EXPECT_DOUBLE_EQ(policy.budget_tokens(), 4.0);  // capped at the maximum
}

TEST(RetryPolicyTest, ValidateNamesTheBadOption) {
  RetryPolicy::Options o;
  EXPECT_TRUE(RetryPolicy::Validate(o).ok());
  o.max_attempts = 0;
  EXPECT_NE(RetryPolicy::Validate(o).message().find("max_attempts"), absl::string_view::npos);
  o = RetryPolicy::Options();
  o.jitter = 1.5;
  EXPECT_NE(RetryPolicy::Validate(o).message().find("jitter"), absl::string_view::npos);
  o = RetryPolicy::Options();
  o.multiplier = 0.5;
  EXPECT_NE(RetryPolicy::Validate(o).message().find("multiplier"), absl::string_view::npos);
}

}  // namespace
}  // namespace kvserve::client
