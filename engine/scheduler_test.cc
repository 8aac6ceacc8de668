#include "engine/scheduler.h"

#include <memory>
#include <numeric>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

constexpr int kBlockTokens = 4;

class SchedulerTest : public ::testing::Test {
 protected:
  void Init(int blocks, int max_running, int max_step_tokens) {
    cache::KvCacheManager::Options o;
    o.layout = model::KvLayout{1, 4, kBlockTokens, model::DType::kF32};
    o.budget_bytes = static_cast<size_t>(blocks) * o.layout.block_bytes();
    o.model_fingerprint = 3;
    kv_ = *cache::KvCacheManager::Create(o);
    scheduler_ =
        std::make_unique<Scheduler>(Scheduler::Options{max_running, max_step_tokens}, kv_.get());
  }

  Sequence* Add(RequestId id, int n_tokens, int32_t first = 0) {
    SamplingParams p;
    auto seq = std::make_unique<Sequence>(id, *Sampler::Create(p, 100, 1),
                                          OutputProcessor(p, /*eos_id=*/2, nullptr, -1));
    seq->tokens.resize(static_cast<size_t>(n_tokens));
    std::iota(seq->tokens.begin(), seq->tokens.end(), first);
    seq->prompt_len = n_tokens;
    seq->root = kv_->RootHash("");
    Sequence* raw = seq.get();
    scheduler_->Add(std::move(seq));
    return raw;
  }

  // Pretends the backend ran the plan: advances, commits, appends a token to each
  // sequence that reached its end.
  void Execute(const StepPlan& plan) {
    for (const auto& c : plan.chunks) {
      c.seq->num_computed += c.num_tokens;
      kv_->Commit(c.seq->id, c.seq->tokens, c.seq->num_computed);
      if (c.seq->num_computed == static_cast<int32_t>(c.seq->tokens.size())) {
        c.seq->tokens.push_back(7);
      }
    }
  }

  std::unique_ptr<cache::KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, ChunkedPrefillRespectsTheStepBudget) {
  Init(16, 4, 8);
  Sequence* a = Add(1, 20);
  StepPlan p = scheduler_->Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].num_tokens, 8);
  Execute(p);
  Sequence* b = Add(2, 3);
  p = scheduler_->Schedule();  // a's second chunk takes the whole budget
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].seq, a);
  Execute(p);
  p = scheduler_->Schedule();  // a's last 4 tokens, then b's prompt
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].num_tokens, 4);
  EXPECT_EQ(p.chunks[1].seq, b);
  EXPECT_EQ(p.chunks[1].num_tokens, 3);
  Execute(p);
  p = scheduler_->Schedule();  // both decode one token
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].num_tokens, 1);
  EXPECT_EQ(p.chunks[1].num_tokens, 1);
}

TEST_F(SchedulerTest, RunningLimitAndFifoAdmission) {
  Init(32, 2, 100);
  Add(1, 5);
  Add(2, 5);
  Add(3, 5);
  StepPlan p = scheduler_->Schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].seq->id, 1u);
  EXPECT_EQ(p.chunks[1].seq->id, 2u);
  EXPECT_EQ(scheduler_->waiting().size(), 1u);
  Execute(p);
  scheduler_->Remove(1);
  p = scheduler_->Schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[1].seq->id, 3u);
}

TEST_F(SchedulerTest, PreemptsTheYoungestAndResumesFromCachedBlocks) {
  Init(4, 4, 100);  // 16 positions
  Add(1, 7);
  Add(2, 6, 50);
  StepPlan p = scheduler_->Schedule();
  ASSERT_EQ(p.chunks.size(), 2u);  // 2 + 2 blocks
  Execute(p);                      // tokens: 8 and 7, both still inside 2 blocks
  p = scheduler_->Schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  Execute(p);                  // tokens: 9 and 8
  p = scheduler_->Schedule();  // a's position 8 needs a 3rd block: b is preempted
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].seq->id, 1u);
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0]->id, 2u);
  EXPECT_EQ(scheduler_->preemptions_total(), 1);
  ASSERT_EQ(scheduler_->waiting().size(), 1u);
  EXPECT_EQ(scheduler_->waiting().front()->num_computed, 0);
  Execute(p);
  scheduler_->Remove(1);
  // b comes back with its 8 tokens: both full blocks it wrote (positions 0-7) are
  // still cached, minus the last one, which holds the token that must run.
  p = scheduler_->Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].seq->id, 2u);
  EXPECT_EQ(p.chunks[0].seq->num_computed, 4);
  EXPECT_EQ(p.chunks[0].num_tokens, 4);
  // Three admissions looked up one full block each; b's second found it.
  EXPECT_EQ(kv_->stats().prefix_queries_total, 3);
  EXPECT_EQ(kv_->stats().prefix_hits_total, 1);
}

TEST_F(SchedulerTest, AHeadThatDoesNotFitWaitsAndIsCountedOnce) {
  Init(4, 4, 100);
  Add(1, 11);
  StepPlan p = scheduler_->Schedule();  // 3 blocks
  Execute(p);
  Add(2, 9, 50);  // needs 3 blocks: only 1 is free
  for (int step = 0; step < 3; ++step) {
    p = scheduler_->Schedule();
    ASSERT_EQ(p.chunks.size(), 1u);
    EXPECT_EQ(p.chunks[0].seq->id, 1u);
    EXPECT_TRUE(p.preempted.empty());
    Execute(p);
  }
  EXPECT_EQ(scheduler_->waiting().size(), 1u);
  EXPECT_EQ(kv_->stats().prefix_queries_total, 2);  // only a's admission so far
  scheduler_->Remove(1);
  p = scheduler_->Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].seq->id, 2u);
  EXPECT_EQ(kv_->stats().prefix_queries_total, 4);
}

TEST_F(SchedulerTest, ASequenceLargerThanThePoolIsReported) {
  Init(2, 4, 100);  // 8 positions
  Sequence* a = Add(1, 8);
  StepPlan p = scheduler_->Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  Execute(p);  // 9 tokens: position 8 needs a third block
  p = scheduler_->Schedule();
  EXPECT_TRUE(p.chunks.empty());
  ASSERT_EQ(p.out_of_blocks.size(), 1u);
  EXPECT_EQ(p.out_of_blocks[0], a);
}

}  // namespace
}  // namespace kvserve::engine

namespace kvserve::engine {
namespace {

// Drafts are reserved after the real tokens, from what is free: when the pool is short
// they are dropped and nobody is preempted; the budget cuts them to what is left.
TEST_F(SchedulerTest, DraftsNeverPreemptAndFitTheBudget) {
  Init(4, 4, 64);
  Sequence* a = Add(1, 7);          // 2 blocks
  Add(2, 3);                        // 1 block
  Execute(scheduler_->Schedule());  // both prefilled; each now has its first sampled token
  // a (8 tokens, 7 computed) drafts 6 tokens: positions up to 15 need 2 more blocks, only 1 free.
  a->tokens.insert(a->tokens.end(), {1, 2, 3, 4, 5, 6});
  a->draft_tokens = 6;
  StepPlan p = scheduler_->Schedule();
  EXPECT_TRUE(p.preempted.empty());
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].seq, a);
  EXPECT_EQ(p.chunks[0].num_tokens, 1);  // drafts dropped
  EXPECT_EQ(a->draft_tokens, 0);
  EXPECT_EQ(a->tokens.size(), 8u);
  EXPECT_EQ(p.chunks[1].num_tokens, 1);
  Execute(p);
  // With room, the drafts run, cut to the budget.
  Init(16, 4, 4);
  Sequence* c = Add(3, 5);
  Execute(scheduler_->Schedule());
  c->tokens.insert(c->tokens.end(), {1, 2, 3, 4, 5});
  c->draft_tokens = 5;
  p = scheduler_->Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].num_tokens, 4);  // the real token and 3 drafts
  EXPECT_EQ(c->draft_tokens, 5);         // the engine verifies the 3 that run
}

}  // namespace
}  // namespace kvserve::engine
