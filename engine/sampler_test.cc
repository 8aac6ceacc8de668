#include "engine/sampler.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/testing/chi_square.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Sampler MakeSampler(const SamplingParams& params, int32_t vocab, uint64_t fallback_seed = 7) {
  absl::StatusOr<Sampler> sampler = Sampler::Create(params, vocab, fallback_seed);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return *std::move(sampler);
}

std::vector<float> RandomLogits(int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& l : logits) l = normal(rng);
  return logits;
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double m = -1e300;
  for (float l : logits) m = std::max(m, static_cast<double>(l));
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((logits[i] - m) / temperature);
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  return p;
}

// Logits whose softmax is exactly `probs` (up to float rounding).
std::vector<float> LogitsFromProbs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Draws `n` tokens, each from a fresh copy of `logits` (Sample modifies its input).
std::map<int32_t, int> Draw(Sampler& sampler, const std::vector<float>& logits, int n) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) {
    std::vector<float> copy = logits;
    ++counts[sampler.Sample(copy, {}, 0, nullptr)];
  }
  return counts;
}

// ---------------------------------------------------------------------------------
// Validation

// Server limits the validation tests use (small, so that tests can exceed them).
constexpr StopLimits kTestStopLimits{/*max_stop_strings=*/3, /*max_stop_string_bytes=*/8,
                                     /*max_stop_token_ids=*/4};

struct BadCase {
  std::string field;
  SamplingParams params;
  bool server_limit = false;  // beyond a server limit only: the sampler accepts it
};

std::vector<BadCase> BadCases() {
  std::vector<BadCase> cases;
  auto add = [&cases](std::string field, auto mutate, bool server_limit = false) {
    SamplingParams p;
    mutate(p);
    cases.push_back({std::move(field), std::move(p), server_limit});
  };
  add("temperature", [](SamplingParams& p) { p.temperature = -0.5f; });
  add("temperature", [](SamplingParams& p) { p.temperature = kNaN; });
  add("temperature", [](SamplingParams& p) { p.temperature = kInf; });
  add("top_k", [](SamplingParams& p) { p.top_k = -1; });
  add("top_k", [](SamplingParams& p) { p.top_k = 101; });
  add("top_p", [](SamplingParams& p) { p.top_p = 0.0f; });
  add("top_p", [](SamplingParams& p) { p.top_p = 1.01f; });
  add("top_p", [](SamplingParams& p) { p.top_p = kNaN; });
  add("min_p", [](SamplingParams& p) { p.min_p = -0.1f; });
  add("min_p", [](SamplingParams& p) { p.min_p = 1.5f; });
  add("min_p", [](SamplingParams& p) { p.min_p = kNaN; });
  add("repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; });
  add("repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = -1.0f; });
  add("repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = kInf; });
  add("repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = kNaN; });
  add("frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = 2.5f; });
  add("frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -2.5f; });
  add("frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = kNaN; });
  add("presence_penalty", [](SamplingParams& p) { p.presence_penalty = 3.0f; });
  add("presence_penalty", [](SamplingParams& p) { p.presence_penalty = kNaN; });
  add("max_tokens", [](SamplingParams& p) { p.max_tokens = 0; });
  add(
      "max_tokens", [](SamplingParams& p) { p.max_tokens = 1001; }, true);
  add("stop_token_ids", [](SamplingParams& p) { p.stop_token_ids = {5, 100}; });
  add("stop_token_ids", [](SamplingParams& p) { p.stop_token_ids = {-1}; });
  add(
      "stop_token_ids",
      [](SamplingParams& p) { p.stop_token_ids.assign(kTestStopLimits.max_stop_token_ids + 1, 3); },
      true);
  add("stop_strings", [](SamplingParams& p) { p.stop_strings = {"ok", ""}; });
  add(
      "stop_strings[0]",
      [](SamplingParams& p) {
        p.stop_strings = {std::string(kTestStopLimits.max_stop_string_bytes + 1, 'x')};
      },
      true);
  add(
      "stop_strings",
      [](SamplingParams& p) { p.stop_strings.assign(kTestStopLimits.max_stop_strings + 1, "a"); },
      true);
  add("stop_strings", [](SamplingParams& p) { p.stop_strings = {"\xE4\xB8"}; });  // cut char
  add("top_logprobs", [](SamplingParams& p) { p.top_logprobs = -1; });
  add("top_logprobs", [](SamplingParams& p) { p.top_logprobs = kMaxTopLogprobs + 1; });
  return cases;
}

TEST(SamplingParamsTest, DefaultsAndLimitsAreValid) {
  EXPECT_TRUE(SamplingParams{}.Validate(100, 1000, kTestStopLimits).ok());
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 100;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.frequency_penalty = -2.0f;
  p.presence_penalty = 2.0f;
  p.max_tokens = 1000;
  p.stop_token_ids = {0, 99, 1, 2};
  p.stop_strings = {std::string(kTestStopLimits.max_stop_string_bytes, 'x'), "中华", "z"};
  p.top_logprobs = kMaxTopLogprobs;
  EXPECT_TRUE(p.Validate(100, 1000, kTestStopLimits).ok())
      << p.Validate(100, 1000, kTestStopLimits);
}

TEST(SamplingParamsTest, EachBadFieldIsNamed) {
  for (const BadCase& c : BadCases()) {
    const absl::Status status =
        c.params.Validate(/*vocab_size=*/100, /*max_tokens_limit=*/1000, kTestStopLimits);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field << ": " << status;
    EXPECT_THAT(std::string(status.message()), StartsWith(c.field));
    // A server limit is named in the message, so that a client knows what to change.
    if (c.server_limit && c.field != "max_tokens") {
      EXPECT_THAT(std::string(status.message()), HasSubstr("the server's max_stop_")) << status;
    }
    // The sampler rejects the same parameters (except those beyond a server limit).
    if (!c.server_limit) {
      absl::StatusOr<Sampler> sampler = Sampler::Create(c.params, 100, 0);
      EXPECT_FALSE(sampler.ok()) << c.field;
      if (!sampler.ok()) {
        EXPECT_THAT(std::string(sampler.status().message()), StartsWith(c.field));
      }
    }
  }
}

TEST(SamplerTest, CreateRejectsEmptyVocabulary) {
  EXPECT_EQ(Sampler::Create(SamplingParams{}, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------
// Greedy

TEST(SamplerTest, TemperatureZeroIsArgmaxWithTiesToLowestId) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler = MakeSampler(params, 6);
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f, kNaN};
  EXPECT_EQ(sampler.Sample(logits, {}, 0, nullptr), 1);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<float> random = RandomLogits(50, seed);
    const int32_t expected =
        static_cast<int32_t>(std::max_element(random.begin(), random.end()) - random.begin());
    SamplingParams seeded = params;
    seeded.seed = seed;
    Sampler s = MakeSampler(seeded, 50);
    EXPECT_EQ(s.Sample(random, {}, 0, nullptr), expected);
  }
}

TEST(SamplerTest, GreedyIgnoresTruncationSettings) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.top_k = 2;
  params.top_p = 0.1f;
  params.min_p = 0.9f;
  Sampler sampler = MakeSampler(params, 4);
  std::vector<float> logits = {1.0f, 2.0f, 5.0f, 0.0f};
  EXPECT_EQ(sampler.Sample(logits, {}, 0, nullptr), 2);
}

TEST(SamplerTest, AllMaskedLogitsReturnTokenZero) {
  std::vector<float> logits = {-kInf, kNaN, -kInf};
  SamplingParams params;
  Sampler stochastic = MakeSampler(params, 3);
  EXPECT_EQ(stochastic.Sample(logits, {}, 0, nullptr), 0);
  params.temperature = 0.0f;
  Sampler greedy = MakeSampler(params, 3);
  logits = {-kInf, kNaN, -kInf};
  EXPECT_EQ(greedy.Sample(logits, {}, 0, nullptr), 0);
}

TEST(SamplerTest, MaskedTokensAreNeverSampled) {
  SamplingParams params;
  params.seed = 3;
  Sampler sampler = MakeSampler(params, 4);
  const std::vector<float> logits = {-kInf, 0.0f, kNaN, 0.0f};
  for (const auto& [token, count] : Draw(sampler, logits, 2000)) {
    EXPECT_TRUE(token == 1 || token == 3) << token;
  }
}

TEST(SamplerTest, TinyTemperatureDoesNotOverflow) {
  SamplingParams params;
  params.temperature = 1e-30f;
  params.seed = 1;
  Sampler sampler = MakeSampler(params, 4);
  const std::vector<float> logits = {1.0f, 1e30f, 1.0f, 1e30f - 1e24f};
  const auto counts = Draw(sampler, logits, 200);
  EXPECT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts.begin()->first, 1);
}

// ---------------------------------------------------------------------------------
// Truncation

TEST(SamplerTest, TopKNeverLeavesTheKBest) {
  const int32_t vocab = 64;
  for (int32_t k : {1, 3, 10}) {
    const std::vector<float> logits = RandomLogits(vocab, 100 + static_cast<uint64_t>(k));
    std::vector<int32_t> order(vocab);
    for (int32_t i = 0; i < vocab; ++i) order[static_cast<size_t>(i)] = i;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
    });
    const std::set<int32_t> best(order.begin(), order.begin() + k);
    SamplingParams params;
    params.top_k = k;
    params.temperature = 3.0f;  // flatten, so tokens outside the k best would show up
    params.seed = 42;
    Sampler sampler = MakeSampler(params, vocab);
    const auto counts = Draw(sampler, logits, 5000);
    std::set<int32_t> seen;
    for (const auto& [token, count] : counts) {
      EXPECT_TRUE(best.count(token)) << "k=" << k << " token " << token;
      seen.insert(token);
    }
    EXPECT_EQ(seen, best) << "k=" << k;  // and every one of them does come up
  }
}

TEST(SamplerTest, TopKTiesGoToLowerIds) {
  SamplingParams params;
  params.top_k = 2;
  params.seed = 5;
  Sampler sampler = MakeSampler(params, 5);
  const std::vector<float> logits = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
  for (const auto& [token, count] : Draw(sampler, logits, 1000)) {
    EXPECT_TRUE(token == 1 || token == 2) << token;
  }
}

TEST(SamplerTest, TopPNeverLeavesTheNucleus) {
  // Sorted mass: 0.4, 0.7, 0.9 >= 0.8, so the nucleus is {2, 0, 4}.
  const std::vector<double> probs = {0.3, 0.05, 0.4, 0.05, 0.2};
  SamplingParams params;
  params.top_p = 0.8f;
  params.seed = 11;
  Sampler sampler = MakeSampler(params, 5);
  const auto counts = Draw(sampler, LogitsFromProbs(probs), 20000);
  std::set<int32_t> seen;
  for (const auto& [token, count] : counts) seen.insert(token);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 2, 4}));
  // Renormalised inside the nucleus: 0.4/0.9, 0.3/0.9, 0.2/0.9.
  EXPECT_NEAR(counts.at(2) / 20000.0, 0.4 / 0.9, 0.02);
  EXPECT_NEAR(counts.at(0) / 20000.0, 0.3 / 0.9, 0.02);
  EXPECT_NEAR(counts.at(4) / 20000.0, 0.2 / 0.9, 0.02);
}

TEST(SamplerTest, TopPOnALargeFlatTailKeepsTheNucleus) {
  // One strong token and a long tail: exercises the pre-filter before the sort.
  const int32_t vocab = 1000;
  std::vector<float> logits(vocab, 0.0f);
  logits[17] = 8.0f;   // p ~ 0.59
  logits[400] = 7.0f;  // p ~ 0.22; the 998 others ~ 0.0002 each
  const std::vector<double> p = Softmax(logits);
  ASSERT_LT(p[17], 0.75);
  ASSERT_GT(p[17] + p[400], 0.75);
  SamplingParams params;
  params.top_p = 0.75f;
  params.seed = 2;
  Sampler sampler = MakeSampler(params, vocab);
  std::set<int32_t> seen;
  for (const auto& [token, count] : Draw(sampler, logits, 3000)) seen.insert(token);
  EXPECT_EQ(seen, (std::set<int32_t>{17, 400}));
}

TEST(SamplerTest, TinyTopPKeepsOnlyTheMostLikely) {
  SamplingParams params;
  params.top_p = 1e-6f;
  params.seed = 9;
  Sampler sampler = MakeSampler(params, 3);
  const auto counts = Draw(sampler, {0.0f, 0.5f, 0.5f}, 500);
  EXPECT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts.begin()->first, 1);  // tie between 1 and 2 goes to the lower id
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  // Threshold 0.2 * 0.5 = 0.1: token 3 (0.05) goes, token 2 (0.15) stays.
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  SamplingParams params;
  params.min_p = 0.2f;
  params.seed = 4;
  Sampler sampler = MakeSampler(params, 4);
  std::set<int32_t> seen;
  for (const auto& [token, count] : Draw(sampler, LogitsFromProbs(probs), 10000)) {
    seen.insert(token);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
}

TEST(SamplerTest, TopKThenTopPThenMinPCombine) {
  // top-k 4 keeps {0..3} (0.35, 0.25, 0.2, 0.1 of the full mass); top-p 0.75 of the
  // kept mass 0.9 -> 0.675: 0.35, 0.6, 0.8 -> {0, 1, 2}; min-p 0.6 -> threshold 0.21
  // drops token 2 (0.2).
  const std::vector<double> probs = {0.35, 0.25, 0.2, 0.1, 0.05, 0.05};
  SamplingParams params;
  params.top_k = 4;
  params.top_p = 0.75f;
  params.min_p = 0.6f;
  params.seed = 8;
  Sampler sampler = MakeSampler(params, 6);
  std::set<int32_t> seen;
  for (const auto& [token, count] : Draw(sampler, LogitsFromProbs(probs), 5000)) {
    seen.insert(token);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

// ---------------------------------------------------------------------------------
// Distribution and determinism

// Pearson's chi-square of `counts` against `expected` probabilities.
double ChiSquare(const std::map<int32_t, int>& counts, const std::vector<double>& expected, int n) {
  double chi2 = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto it = counts.find(static_cast<int32_t>(i));
    const double observed = it == counts.end() ? 0.0 : it->second;
    const double e = expected[i] * n;
    chi2 += (observed - e) * (observed - e) / e;
  }
  return chi2;
}

TEST(SamplerTest, FrequenciesMatchSoftmax) {
  // 8 tokens, 7 degrees of freedom: P(chi2 > 24.32) = 0.001. The seed is fixed, so this
  // is deterministic; a biased sampler (off-by-one in the walk, wrong temperature)
  // lands far above the bound.
  const std::vector<float> logits = {0.5f, -1.0f, 1.5f, 0.0f, 0.2f, -0.3f, 1.0f, -2.0f};
  const int n = 40000;
  for (float temperature : {1.0f, 0.6f, 1.7f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 1234;
    Sampler sampler = MakeSampler(params, 8);
    const auto counts = Draw(sampler, logits, n);
    const std::vector<double> expected = Softmax(logits, temperature);
    EXPECT_LT(ChiSquare(counts, expected, n), 24.32) << "temperature " << temperature;
    // The wrong temperature must fail the same bound (the test can fail).
    const std::vector<double> wrong = Softmax(logits, temperature * 1.3);
    EXPECT_GT(ChiSquare(counts, wrong, n), 24.32) << "temperature " << temperature;
  }
}

TEST(SamplerTest, FixedSeedIsReproducibleAndSeedsDiffer) {
  const int32_t vocab = 100;
  auto run = [&](std::optional<uint64_t> seed, uint64_t fallback) {
    SamplingParams params;
    params.seed = seed;
    params.top_k = 50;
    params.top_p = 0.95f;
    Sampler sampler = MakeSampler(params, vocab, fallback);
    std::vector<int32_t> tokens;
    for (int step = 0; step < 200; ++step) {
      std::vector<float> logits = RandomLogits(vocab, static_cast<uint64_t>(step));
      tokens.push_back(sampler.Sample(logits, {}, 0, nullptr));
    }
    return tokens;
  };
  EXPECT_EQ(run(17, 1), run(17, 2));  // the request seed wins over the fallback
  EXPECT_NE(run(17, 1), run(18, 1));
  EXPECT_EQ(run(std::nullopt, 5), run(std::nullopt, 5));
  EXPECT_NE(run(std::nullopt, 5), run(std::nullopt, 6));
  EXPECT_EQ(run(std::nullopt, 17), run(17, 99));
}

TEST(SamplerTest, CopiesContinueTheSameStream) {
  SamplingParams params;
  params.seed = 77;
  Sampler a = MakeSampler(params, 10);
  const std::vector<float> logits = RandomLogits(10, 1);
  Draw(a, logits, 5);
  Sampler b = a;
  EXPECT_EQ(Draw(a, logits, 50), Draw(b, logits, 50));
}

// ---------------------------------------------------------------------------------
// Penalties (observed through the in-place logits of a greedy sampler)

TEST(SamplerTest, RepetitionPenaltyCoversPromptAndOutput) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 2.0f;
  Sampler sampler = MakeSampler(params, 5);
  std::vector<float> logits = {4.0f, -4.0f, 4.0f, -4.0f, 1.0f};
  const std::vector<int32_t> context = {0, 1, 0, 3, 700, -2};  // out-of-range ids ignored
  sampler.Sample(logits, context, /*prompt_len=*/2, nullptr);
  EXPECT_THAT(logits, ElementsAre(2.0f, -8.0f, 4.0f, -8.0f, 1.0f));  // once per token
}

TEST(SamplerTest, FrequencyAndPresenceCountOnlyGeneratedTokens) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 1.0f;
  Sampler sampler = MakeSampler(params, 5);
  std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  // Prompt {4, 4}; generated: 1 x3, 2 x1.
  const std::vector<int32_t> context = {4, 4, 1, 2, 1, 1};
  EXPECT_EQ(sampler.Sample(logits, context, /*prompt_len=*/2, nullptr), 0);
  EXPECT_THAT(logits, ElementsAre(0.0f, -2.5f, -1.5f, 0.0f, 0.0f));
  // A second call starts from clean counts.
  std::vector<float> again = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  sampler.Sample(again, context, 2, nullptr);
  EXPECT_THAT(again, ElementsAre(0.0f, -2.5f, -1.5f, 0.0f, 0.0f));
}

TEST(SamplerTest, PenaltyChangesTheGreedyChoice) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.presence_penalty = 2.0f;
  Sampler sampler = MakeSampler(params, 3);
  std::vector<float> logits = {1.0f, 2.0f, 0.5f};
  EXPECT_EQ(sampler.Sample(logits, std::vector<int32_t>{1}, 0, nullptr), 0);
  std::vector<float> logits2 = {1.0f, 2.0f, 0.5f};
  EXPECT_EQ(sampler.Sample(logits2, std::vector<int32_t>{1}, 1, nullptr), 1);  // prompt only
}

// ---------------------------------------------------------------------------------
// Log-probabilities

TEST(SamplerTest, LogprobsUseTheOriginalLogits) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 10.0f;
  params.top_logprobs = 3;
  Sampler sampler = MakeSampler(params, 4);
  const std::vector<float> original = {2.0f, 1.0f, 1.0f, -1.0f};
  std::vector<float> logits = original;
  SampleInfo info;
  const int32_t token = sampler.Sample(logits, std::vector<int32_t>{0}, 0, &info);
  EXPECT_EQ(token, 1);  // 2.0 / 10 = 0.2 < 1.0; tie 1 vs 2 -> 1
  const std::vector<double> p = Softmax(original);
  EXPECT_NEAR(info.logprob, std::log(p[1]), 1e-5);
  ASSERT_EQ(info.top_logprobs.size(), 3u);
  EXPECT_EQ(info.top_logprobs[0].token, 0);
  EXPECT_EQ(info.top_logprobs[1].token, 1);
  EXPECT_EQ(info.top_logprobs[2].token, 2);
  EXPECT_NEAR(info.top_logprobs[0].logprob, std::log(p[0]), 1e-5);
  EXPECT_NEAR(info.top_logprobs[2].logprob, std::log(p[2]), 1e-5);
}

TEST(SamplerTest, NoTopLogprobsByDefault) {
  SamplingParams params;
  params.seed = 1;
  Sampler sampler = MakeSampler(params, 4);
  std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f};
  SampleInfo info;
  sampler.Sample(logits, {}, 0, &info);
  EXPECT_TRUE(info.top_logprobs.empty());
  EXPECT_NEAR(info.logprob, std::log(0.25), 1e-6);
}

}  // namespace
}  // namespace kvserve::engine

namespace kvserve::engine {
namespace {

// ---------------------------------------------------------------------------------
// Speculative verification (SampleDraft)

using testing::ChiSquareBound;
using testing::TwoSampleChiSquare;

TEST(SamplerDraftTest, GreedyVerificationIsTheGreedyToken) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler a = MakeSampler(params, 50), b = MakeSampler(params, 50);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::vector<float> logits = RandomLogits(50, seed), copy = logits;
    const int32_t want = a.Sample(logits, {}, 0, nullptr);
    for (int32_t draft : {want, (want + 1) % 50}) {
      std::vector<float> again = copy;
      bool accepted = false;
      EXPECT_EQ(b.SampleDraft(again, {}, 0, draft, nullptr, &accepted), want);
      EXPECT_EQ(accepted, draft == want);
    }
  }
}

// With the same seed, verification emits exactly the tokens of sampling without drafts
// (seeded requests give the same output with speculation on or off).
TEST(SamplerDraftTest, SameSeedSameTokensWhateverTheDrafts) {
  SamplingParams params;
  params.seed = 5;
  params.top_p = 0.9f;
  Sampler plain = MakeSampler(params, 50), drafted = MakeSampler(params, 50);
  for (uint64_t step = 0; step < 200; ++step) {
    std::vector<float> a = RandomLogits(50, step), b = a;
    bool accepted = false;
    const int32_t draft = static_cast<int32_t>(step % 7);
    EXPECT_EQ(drafted.SampleDraft(b, {}, 0, draft, nullptr, &accepted),
              plain.Sample(a, {}, 0, nullptr));
  }
}

// The token SampleDraft emits is distributed as Sample's, whatever the draft: likely,
// unlikely, or outside the kept set; with every truncation and penalty. Two samples of
// 40000 seeded draws each (deterministic), compared at the 0.001 level; the acceptance
// rate is p(draft). The same comparison against the draft always accepted fails.
TEST(SamplerDraftTest, VerificationKeepsTheTargetDistribution) {
  const int32_t vocab = 12;
  const std::vector<float> logits = {0.5f, -1.0f, 1.5f, 0.0f, 0.2f,  -0.3f,
                                     1.0f, -2.0f, 0.7f, 0.1f, -0.5f, 0.9f};
  const std::vector<int32_t> context = {2, 6, 6, 11};  // penalties act on these
  struct Case {
    const char* name;
    SamplingParams params;
  };
  std::vector<Case> cases;
  auto add = [&cases](const char* name, auto mutate) {
    SamplingParams p;
    p.seed = 99;
    mutate(p);
    cases.push_back({name, p});
  };
  add("temperature 1", [](SamplingParams&) {});
  add("temperature 0.6, top_k 5", [](SamplingParams& p) {
    p.temperature = 0.6f;
    p.top_k = 5;
  });
  add("top_p 0.7", [](SamplingParams& p) { p.top_p = 0.7f; });
  add("min_p 0.2", [](SamplingParams& p) { p.min_p = 0.2f; });
  add("penalties", [](SamplingParams& p) {
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.4f;
  });
  const int n = 40000;
  for (const Case& c : cases) {
    for (int32_t draft : {2, 6, 7}) {  // likely, likely after penalties, unlikely/truncated
      Sampler plain = MakeSampler(c.params, vocab);
      SamplingParams other = c.params;
      other.seed = 4242;
      Sampler verify = MakeSampler(other, vocab);
      std::map<int32_t, int> want, got;
      int accepted_count = 0;
      for (int i = 0; i < n; ++i) {
        std::vector<float> a = logits, b = logits;
        ++want[plain.Sample(a, context, 1, nullptr)];
        bool accepted = false;
        ++got[verify.SampleDraft(b, context, 1, draft, nullptr, &accepted)];
        accepted_count += accepted ? 1 : 0;
      }
      int dof = 0;
      const double chi2 = TwoSampleChiSquare(got, want, &dof);
      EXPECT_LT(chi2, ChiSquareBound(dof)) << c.name << ", draft " << draft;
      const double p_draft = want.contains(draft) ? static_cast<double>(want[draft]) / n : 0.0;
      EXPECT_NEAR(static_cast<double>(accepted_count) / n, p_draft, 0.015)
          << c.name << ", draft " << draft;
      // A verifier that accepted every draft would be far off (the test can fail).
      std::map<int32_t, int> always{{draft, n}};
      EXPECT_GT(TwoSampleChiSquare(always, want, &dof), ChiSquareBound(dof));
    }
  }
}

}  // namespace
}  // namespace kvserve::engine
