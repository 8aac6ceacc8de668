// The load generator's pieces without a server: the report's counts and percentiles, and
// the workload's units, prompts and Poisson arrivals.
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "client/bench_report.h"
#include "client/bench_workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::client::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RequestResult Ok(double ttft_s, int tokens, int prompt, int cached) {
  RequestResult r;
  r.ttft_s = ttft_s;
  r.output_tokens = tokens;
  r.prompt_tokens = prompt;
  r.cached_tokens_local = cached;
  r.e2e_s = ttft_s * 2;
  r.itl_s.assign(tokens - 1, 0.001);
  return r;
}

RequestResult Failed(absl::StatusCode code) {
  RequestResult r;
  r.code = code;
  return r;
}

TEST(BenchReportTest, CountsAddUpAndPercentilesAreInMilliseconds) {
  std::vector<RequestResult> results;
  for (int i = 1; i <= 100; ++i) results.push_back(Ok(i * 0.001, 4, 20, 10));
  results.push_back(Failed(absl::StatusCode::kResourceExhausted));
  results.push_back(Failed(absl::StatusCode::kResourceExhausted));
  results.push_back(Failed(absl::StatusCode::kUnavailable));
  RequestResult later = Ok(0.001, 2, 20, 20);
  later.turn = 1;
  later.draft_tokens = 8;
  later.draft_tokens_accepted = 6;
  results.push_back(later);
  later.cached_tokens_local = 0;
  results.push_back(later);
  Recording recording{.requests = results};
  recording.session_calls["OpenSession"]["OK"] = 2;
  recording.session_calls["CloseSession"]["UNAVAILABLE"] = 1;
  recording.malformed["stream ended OK without usage"] = 1;
  recording.outputs["a \"b\"\n"] = {"x", "xy"};
  const Report r = Summarize(std::move(recording), 2.0);
  EXPECT_EQ(r.total, 105);
  EXPECT_EQ(r.ok, 102);
  EXPECT_EQ(r.failed, 3);
  EXPECT_EQ(r.errors_by_code.at("RESOURCE_EXHAUSTED"), 2);
  EXPECT_EQ(r.errors_by_code.at("UNAVAILABLE"), 1);
  EXPECT_EQ(r.calls.at("GenerateStream").at("OK"), 102);
  EXPECT_EQ(r.calls.at("GenerateStream").at("RESOURCE_EXHAUSTED"), 2);
  EXPECT_EQ(r.calls.at("OpenSession").at("OK"), 2);
  EXPECT_EQ(r.failed_calls, 4);  // the three failed requests and a CloseSession
  EXPECT_EQ(r.later_turns, 2);
  EXPECT_EQ(r.later_turns_cached, 1);
  EXPECT_EQ(r.output_tokens, 404);
  EXPECT_DOUBLE_EQ(r.output_tokens_per_s, 202.0);
  EXPECT_DOUBLE_EQ(r.requests_per_s, 51.0);
  EXPECT_DOUBLE_EQ(r.cache_hit_ratio, (1000.0 + 20) / 2040);
  EXPECT_EQ(r.draft_tokens, 16);
  EXPECT_EQ(r.draft_tokens_accepted, 12);
  EXPECT_DOUBLE_EQ(r.draft_acceptance, 0.75);
  EXPECT_THAT(ToText(r),
              HasSubstr("speculative drafts: 16 checked, 12 accepted (acceptance 0.750)"));
  EXPECT_NEAR(r.ttft.p50, 50.0, 1e-9);  // 102 values: rank round(0.5 * 101) = 51 -> 50 ms
  EXPECT_NEAR(r.ttft.p99, 99.0, 1e-9);
  EXPECT_NEAR(r.itl.p50, 1.0, 1e-9);
  const std::string json = ToJson(r, "{}");
  EXPECT_THAT(json, HasSubstr(R"("requests":{"total":105,"ok":102,"failed":3})"));
  EXPECT_THAT(json, HasSubstr(R"("errors_by_code":{"RESOURCE_EXHAUSTED":2,"UNAVAILABLE":1})"));
  EXPECT_THAT(json, HasSubstr(R"("calls":{"CloseSession":{"UNAVAILABLE":1},"GenerateStream":)"
                              R"({"OK":102,"RESOURCE_EXHAUSTED":2,"UNAVAILABLE":1},)"
                              R"("OpenSession":{"OK":2}},"failed_calls":4,)"));
  EXPECT_THAT(json, HasSubstr(R"("malformed":{"stream ended OK without usage":1})"));
  EXPECT_THAT(json, HasSubstr(R"("later_turns":{"total":2,"cached":1})"));
  EXPECT_THAT(json, HasSubstr(R"("outputs":{"a \"b\"\u000a":["x","xy"]})"));
  EXPECT_THAT(ToText(r),
              HasSubstr("105 total, 102 ok, 3 failed (RESOURCE_EXHAUSTED=2 UNAVAILABLE=1)"));
  EXPECT_THAT(ToText(r), HasSubstr("calls: CloseSession UNAVAILABLE=1; GenerateStream OK=102"));
}

TEST(BenchReportTest, EmptyRunIsAllZeros) {
  const Report r = Summarize(Recording(), 0.0);
  EXPECT_EQ(r.total, 0);
  EXPECT_EQ(r.failed_calls, 0);
  EXPECT_EQ(r.cache_hit_ratio, 0.0);
  EXPECT_THAT(ToJson(r, "{}"), HasSubstr(R"("errors_by_code":{})"));
  EXPECT_THAT(ToJson(r, "{}"), Not(HasSubstr("outputs")));
}

TEST(BenchWorkloadTest, CountSplitsIntoConversations) {
  WorkloadOptions o;
  o.shape = "conversation";
  o.turns = 3;
  o.requests = 7;
  UnitSource source(o, absl::Now());
  std::vector<Unit> units;
  std::vector<int> turns;
  while (std::optional<Unit> u = source.Take()) {
    turns.push_back(u->turns);
    units.push_back(*u);
  }
  EXPECT_EQ(turns, (std::vector<int>{3, 3, 1}));
  // Conversations share the system prompt and differ after it; later turns only add.
  EXPECT_TRUE(absl::StartsWith(TurnText(o, units[0], 0), o.system_prompt));
  EXPECT_TRUE(absl::StartsWith(TurnText(o, units[1], 0), o.system_prompt));
  EXPECT_NE(TurnText(o, units[0], 0), TurnText(o, units[1], 0));
  EXPECT_FALSE(absl::StrContains(TurnText(o, units[0], 1), o.system_prompt));
}

TEST(BenchWorkloadTest, PromptsAreDrawnSeededAndStartConversations) {
  WorkloadOptions o;
  o.shape = "conversation";
  o.prompts = {"<p0>", "<p1>", "<p2>"};
  o.requests = 300;
  UnitSource a(o, absl::UnixEpoch()), b(o, absl::UnixEpoch());
  std::set<std::string> first_turns;
  while (std::optional<Unit> u = a.Take()) {
    const Unit v = *b.Take();
    EXPECT_EQ(u->prompt, v.prompt);  // same seed, same draws
    EXPECT_EQ(u->seed, v.seed);
    first_turns.insert(TurnText(o, *u, 0));
    EXPECT_FALSE(absl::StrContains(TurnText(o, *u, 1), o.prompts[u->prompt]));
  }
  EXPECT_EQ(first_turns, (std::set<std::string>{"<p0>", "<p1>", "<p2>"}));
  o.shape = "single";
  Unit u;
  u.prompt = 2;
  EXPECT_EQ(TurnText(o, u, 0), "<p2>");
  o.prompts.clear();
  EXPECT_EQ(TurnText(o, u, 0), o.prompt);
}

TEST(BenchWorkloadTest, PoissonArrivalsHaveTheRateAndAreSeeded) {
  WorkloadOptions o;
  o.requests = 4000;
  o.request_rate = 50;
  o.seed = 7;
  const absl::Time start = absl::UnixEpoch();
  UnitSource a(o, start), b(o, start);
  std::vector<double> gaps;
  absl::Time last = start;
  while (std::optional<Unit> u = a.Take()) {
    EXPECT_EQ(b.Take()->arrival, u->arrival);  // same seed, same schedule
    gaps.push_back(absl::ToDoubleSeconds(u->arrival - last));
    last = u->arrival;
  }
  ASSERT_EQ(gaps.size(), 4000u);
  double mean = 0, var = 0;
  for (double g : gaps) mean += g / gaps.size();
  for (double g : gaps) var += (g - mean) * (g - mean) / gaps.size();
  EXPECT_NEAR(mean, 0.02, 0.002);                // 1 / rate
  EXPECT_NEAR(std::sqrt(var) / mean, 1.0, 0.1);  // exponential: sd = mean
}

TEST(BenchWorkloadTest, DurationEndsTheScheduleAndOptionsAreChecked) {
  WorkloadOptions o;
  o.requests = 0;
  o.duration = absl::Seconds(2);
  o.request_rate = 10;
  UnitSource source(o, absl::UnixEpoch());
  int n = 0;
  while (std::optional<Unit> u = source.Take()) {
    EXPECT_LT(u->arrival, absl::UnixEpoch() + absl::Seconds(2));
    ++n;
  }
  EXPECT_GT(n, 5);
  EXPECT_LT(n, 40);
  EXPECT_TRUE(ValidateWorkload(o).ok());
  o.duration = absl::ZeroDuration();
  EXPECT_FALSE(ValidateWorkload(o).ok());
  o.requests = 1;
  o.shape = "zigzag";
  EXPECT_THAT(std::string(ValidateWorkload(o).message()), HasSubstr("--shape"));
}

}  // namespace
}  // namespace kvserve::client::bench
