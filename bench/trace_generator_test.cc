#include "bench/trace_generator.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

namespace kvserve::bench {
namespace {

using cachesvc::TraceRequest;

// Conversations rebuilt from the trace: a request continues the conversation whose last
// request's blocks (all but the partial last one) it starts with. Returns each
// conversation's requests in order.
std::vector<std::vector<const TraceRequest*>> Conversations(const std::vector<TraceRequest>& t,
                                                            int32_t block_tokens) {
  std::vector<std::vector<const TraceRequest*>> conversations;
  // The id of a conversation's last request's last full block -> (conversation, its index).
  absl::flat_hash_map<uint64_t, size_t> open;
  for (const TraceRequest& req : t) {
    size_t conversation = conversations.size();
    for (size_t k = req.hash_ids.size(); k-- > 0;) {
      auto it = open.find(req.hash_ids[k]);
      if (it == open.end()) continue;
      const TraceRequest& last = *conversations[it->second].back();
      if (last.input_length / block_tokens == static_cast<int64_t>(k + 1) &&
          req.input_length > last.input_length) {
        conversation = it->second;
        break;
      }
    }
    if (conversation == conversations.size()) conversations.emplace_back();
    conversations[conversation].push_back(&req);
    const size_t full = static_cast<size_t>(req.input_length / block_tokens);
    if (full > 0) open[req.hash_ids[full - 1]] = conversation;
  }
  return conversations;
}

// Conversations without a shared prefix, whose turns Conversations() can tell apart.
SyntheticTraceOptions NoSharedPrompts() {
  SyntheticTraceOptions o;
  o.system_prompts = 0;
  o.conversations = 4000;
  o.prompt_sigma = 0.3;  // first prompts of at least one full block, so turns can be chained
  return o;
}

TEST(GenerateTraceTest, SameSeedSameTraceOtherSeedOtherTrace) {
  SyntheticTraceOptions o;
  o.conversations = 200;
  absl::StatusOr<std::vector<TraceRequest>> a = GenerateTrace(o);
  absl::StatusOr<std::vector<TraceRequest>> b = GenerateTrace(o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].timestamp_ms, (*b)[i].timestamp_ms);
    EXPECT_EQ((*a)[i].input_length, (*b)[i].input_length);
    EXPECT_EQ((*a)[i].output_length, (*b)[i].output_length);
    EXPECT_EQ((*a)[i].hash_ids, (*b)[i].hash_ids);
  }
  o.seed = 2;
  absl::StatusOr<std::vector<TraceRequest>> c = GenerateTrace(o);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->front().input_length, a->front().input_length);
}

TEST(GenerateTraceTest, ShapeOfEachRequest) {
  SyntheticTraceOptions o;
  o.conversations = 300;
  absl::StatusOr<std::vector<TraceRequest>> t = GenerateTrace(o);
  ASSERT_TRUE(t.ok());
  uint64_t next_new_id = 0;
  for (size_t i = 0; i < t->size(); ++i) {
    const TraceRequest& req = (*t)[i];
    if (i > 0) {
      EXPECT_GE(req.timestamp_ms, (*t)[i - 1].timestamp_ms);
    }
    EXPECT_EQ(static_cast<int64_t>(req.hash_ids.size()),
              (req.input_length + o.block_tokens - 1) / o.block_tokens);
    EXPECT_GE(req.output_length, 1);
    for (uint64_t id : req.hash_ids) {  // numbered in order of first appearance
      EXPECT_LE(id, next_new_id);
      next_new_id = std::max(next_new_id, id + 1);
    }
  }
}

// Every conversation's turns chain: a later turn starts with the earlier one's full blocks.
TEST(GenerateTraceTest, TurnsAndMeansWithinTolerance) {
  SyntheticTraceOptions o = NoSharedPrompts();
  o.turns_mean = 4.0;
  absl::StatusOr<std::vector<TraceRequest>> t = GenerateTrace(o);
  ASSERT_TRUE(t.ok());
  const auto conversations = Conversations(*t, o.block_tokens);
  EXPECT_EQ(static_cast<int64_t>(conversations.size()), o.conversations);
  EXPECT_NEAR(static_cast<double>(t->size()) / static_cast<double>(o.conversations), 4.0, 0.2);
  double answers = 0, first_prompts = 0, think_s = 0;
  int64_t gaps = 0;
  for (const auto& c : conversations) {
    first_prompts += static_cast<double>(c[0]->input_length);
    for (size_t k = 1; k < c.size(); ++k) {
      think_s += static_cast<double>(c[k]->timestamp_ms - c[k - 1]->timestamp_ms) / 1000.0;
      ++gaps;
    }
  }
  for (const TraceRequest& req : *t) answers += static_cast<double>(req.output_length);
  EXPECT_NEAR(answers / static_cast<double>(t->size()), o.answer_mean_tokens, 20.0);
  EXPECT_NEAR(first_prompts / static_cast<double>(conversations.size()), o.first_prompt_mean_tokens,
              120.0);
  EXPECT_NEAR(think_s / static_cast<double>(gaps), o.think_mean_s, 4.0);
  const double span_s = static_cast<double>(t->back().timestamp_ms) / 1000.0;
  EXPECT_GT(span_s, 0.9 * static_cast<double>(o.conversations) / o.conversations_per_s);
}

TEST(GenerateTraceTest, HeavyTailedDistributionsKeepTheirMeans) {
  SyntheticTraceOptions o = NoSharedPrompts();
  o.conversations = 6000;
  o.turns = TurnsDistribution::kPareto;
  o.turns_mean = 3.0;
  o.turns_alpha = 3.0;  // finite variance: the sample mean settles
  o.max_turns = 100'000;
  o.think = GapDistribution::kLognormal;
  o.think_mean_s = 30.0;
  o.think_sigma = 1.0;
  absl::StatusOr<std::vector<TraceRequest>> t = GenerateTrace(o);
  ASSERT_TRUE(t.ok());
  const auto conversations = Conversations(*t, o.block_tokens);
  EXPECT_NEAR(static_cast<double>(t->size()) / static_cast<double>(o.conversations), 3.0, 0.2);
  double think_s = 0;
  int64_t gaps = 0;
  for (const auto& c : conversations) {
    for (size_t k = 1; k < c.size(); ++k) {
      think_s += static_cast<double>(c[k]->timestamp_ms - c[k - 1]->timestamp_ms) / 1000.0;
      ++gaps;
    }
  }
  EXPECT_NEAR(think_s / static_cast<double>(gaps), 30.0, 2.0);
  o.think = GapDistribution::kPareto;
  o.think_alpha = 3.0;
  o.turns = TurnsDistribution::kFixed;
  t = GenerateTrace(o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(static_cast<int64_t>(t->size()), 3 * o.conversations);
}

TEST(GenerateTraceTest, SystemPromptsAreSharedPrefixes) {
  SyntheticTraceOptions o;
  o.conversations = 500;
  o.system_prompts = 3;
  o.system_prompt_tokens = 1024;  // 2 full blocks
  o.system_prompt_zipf = 0.0;
  absl::StatusOr<std::vector<TraceRequest>> t = GenerateTrace(o);
  ASSERT_TRUE(t.ok());
  std::map<std::vector<uint64_t>, int> heads;
  for (const TraceRequest& req : *t) {
    ASSERT_GE(req.hash_ids.size(), 3u);
    ++heads[{req.hash_ids[0], req.hash_ids[1]}];
  }
  EXPECT_EQ(heads.size(), 3u);
  for (const auto& [head, n] : heads) EXPECT_GT(n, static_cast<int>(t->size()) / 5);
}

TEST(GenerateTraceTest, RejectsOptionsOutOfRange) {
  SyntheticTraceOptions o;
  o.turns_alpha = 1.0;
  EXPECT_EQ(GenerateTrace(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SyntheticTraceOptions{};
  o.conversations = 0;
  EXPECT_EQ(GenerateTrace(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SyntheticTraceOptions{};
  o.turns_mean = 0.5;
  EXPECT_EQ(GenerateTrace(o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TurnsDistributionFromName("zipf"), std::nullopt);
  EXPECT_EQ(GapDistributionFromName("pareto"), GapDistribution::kPareto);
}

}  // namespace
}  // namespace kvserve::bench
