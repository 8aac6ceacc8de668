// PlanStep: stacked rows, attention tasks and logit rows of prefill, decode, mixed and
// chunked steps, and the grouping of KV heads into attention tasks.
#include "backends/cpu_blas/step_plan.h"

#include <cstdint>
#include <ostream>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::backends::cpu_blas {

void PrintTo(const StepRow& r, std::ostream* os) {
  *os << "{seq " << r.seq << ", pos " << r.pos << ", token " << r.token << "}";
}
void PrintTo(const AttentionTask& t, std::ostream* os) {
  *os << "{seq " << t.seq << ", kv_heads [" << t.kv_head << ", " << t.kv_head + t.kv_heads
      << "), rows [" << t.row_begin << ", " << t.row_end << "), "
      << (t.path == AttentionPath::kSgemm ? "sgemm" : "paged") << "}";
}
void PrintTo(const LogitRow& l, std::ostream* os) {
  *os << "{row " << l.row << ", slot " << l.slot << "}";
}

namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr AttentionPath kPaged = AttentionPath::kPaged;
constexpr AttentionPath kSgemm = AttentionPath::kSgemm;

// A batch over token vectors that the test keeps alive (PlanStep never reads blocks).
struct TestBatch {
  struct Seq {
    std::vector<int32_t> tokens;
    int32_t cached = 0;
    bool want_logits = true;
  };
  explicit TestBatch(std::vector<Seq> s) : seqs(std::move(s)) {
    for (const Seq& q : seqs) {
      batch.sequences.push_back(SequenceInput{q.tokens, q.cached, {}, q.want_logits});
    }
  }
  TestBatch(const TestBatch&) = delete;  // `batch` points into `seqs`
  TestBatch& operator=(const TestBatch&) = delete;
  std::vector<Seq> seqs;
  Batch batch;
};

// Tokens 100, 101, ... so that each row's token tells its index in the sequence.
std::vector<int32_t> Tokens(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 100 + i;
  return t;
}

// Every (row, KV head) pair is covered by exactly one task whose rows all belong to the
// row's sequence at consecutive positions; kSgemm tasks have one head and at least
// kAttentionSgemmMinRows rows, kPaged tasks fewer rows (any number without
// `sgemm_attention`); no task exceeds kAttentionRowsPerTask rows.
void ExpectTasksPartitionRowsAndHeads(const StepPlan& plan, int n_kv_heads,
                                      bool sgemm_attention = true) {
  std::vector<int> covered(plan.rows.size() * static_cast<size_t>(n_kv_heads), 0);
  for (const AttentionTask& t : plan.attention_tasks) {
    SCOPED_TRACE(::testing::PrintToString(t));
    ASSERT_LT(t.row_begin, t.row_end);
    ASSERT_LE(t.row_end, static_cast<int>(plan.rows.size()));
    ASSERT_GE(t.kv_head, 0);
    ASSERT_GE(t.kv_heads, 1);
    ASSERT_LE(t.kv_head + t.kv_heads, n_kv_heads);
    const int n_rows = t.row_end - t.row_begin;
    EXPECT_LE(n_rows, kAttentionRowsPerTask);
    if (t.path == kSgemm) {
      EXPECT_TRUE(sgemm_attention);
      EXPECT_GE(n_rows, kAttentionSgemmMinRows);
      EXPECT_EQ(t.kv_heads, 1);
    } else if (sgemm_attention) {
      EXPECT_LT(n_rows, kAttentionSgemmMinRows);
    }
    for (int r = t.row_begin; r < t.row_end; ++r) {
      EXPECT_EQ(plan.rows[r].seq, t.seq);
      EXPECT_EQ(plan.rows[r].pos, plan.rows[t.row_begin].pos + (r - t.row_begin));
      for (int h = t.kv_head; h < t.kv_head + t.kv_heads; ++h) {
        ++covered[static_cast<size_t>(r) * n_kv_heads + h];
      }
    }
  }
  for (size_t i = 0; i < covered.size(); ++i) {
    EXPECT_EQ(covered[i], 1) << "row " << i / n_kv_heads << ", KV head " << i % n_kv_heads;
  }
}

TEST(StepPlanTest, EmptyBatchPlansNothing) {
  const StepPlan plan = PlanStep(Batch{}, {.n_kv_heads = 4, .threads = 2});
  EXPECT_THAT(plan.rows, IsEmpty());
  EXPECT_THAT(plan.attention_tasks, IsEmpty());
  EXPECT_THAT(plan.logit_rows, IsEmpty());
}

TEST(StepPlanTest, PrefillStacksPositionsAndSplitsRowsIntoSgemmTasks) {
  // 70 tokens: ranges [0, 32), [32, 64) and [64, 70), each per KV head.
  TestBatch b({{Tokens(70)}});
  const StepPlan plan = PlanStep(b.batch, {.n_kv_heads = 2, .threads = 2});
  ASSERT_EQ(plan.rows.size(), 70u);
  for (int r = 0; r < 70; ++r) {
    EXPECT_EQ(plan.rows[r], (StepRow{0, r, 100 + r})) << r;
  }
  EXPECT_THAT(
      plan.attention_tasks,
      ElementsAre(AttentionTask{0, 0, 1, 0, 32, kSgemm}, AttentionTask{0, 1, 1, 0, 32, kSgemm},
                  AttentionTask{0, 0, 1, 32, 64, kSgemm}, AttentionTask{0, 1, 1, 32, 64, kSgemm},
                  AttentionTask{0, 0, 1, 64, 70, kSgemm}, AttentionTask{0, 1, 1, 64, 70, kSgemm}));
  EXPECT_THAT(plan.logit_rows, ElementsAre(LogitRow{69, 0}));
  ExpectTasksPartitionRowsAndHeads(plan, 2);
}

TEST(StepPlanTest, LogitsRowsTakeTheLastPositionsInTheirSlots) {
  // Sequence 0 does not want logits but keeps its slot; sequence 1 verifies 3 positions
  // (slots 1-3); sequence 2 wants its last token's (slot 4).
  TestBatch b({{Tokens(2), 0, false}, {Tokens(4), 9}, {Tokens(1), 5}});
  b.batch.sequences[1].logits_rows = 3;
  const StepPlan plan = PlanStep(b.batch, {.n_kv_heads = 1, .threads = 1});
  EXPECT_THAT(plan.logit_rows,
              ElementsAre(LogitRow{3, 1}, LogitRow{4, 2}, LogitRow{5, 3}, LogitRow{6, 4}));
  EXPECT_EQ(LogitRowCount(b.batch), 5u);
}

TEST(StepPlanTest, WithoutSgemmAttentionEveryRangeIsPaged) {
  // Batch invariance: the same 70 tokens, every range on the paged path, one task per
  // range and KV head (ranges of several rows read the K/V head by head).
  TestBatch b({{Tokens(70)}});
  const StepPlan plan =
      PlanStep(b.batch, {.n_kv_heads = 2, .threads = 2, .sgemm_attention = false});
  EXPECT_THAT(
      plan.attention_tasks,
      ElementsAre(AttentionTask{0, 0, 1, 0, 32, kPaged}, AttentionTask{0, 1, 1, 0, 32, kPaged},
                  AttentionTask{0, 0, 1, 32, 64, kPaged}, AttentionTask{0, 1, 1, 32, 64, kPaged},
                  AttentionTask{0, 0, 1, 64, 70, kPaged}, AttentionTask{0, 1, 1, 64, 70, kPaged}));
  ExpectTasksPartitionRowsAndHeads(plan, 2, /*sgemm_attention=*/false);
}

TEST(StepPlanTest, ShortTailOfAPrefillTakesThePagedPath) {
  // 66 tokens: the last range [64, 66) has 2 rows, fewer than kAttentionSgemmMinRows:
  // paged, one task per KV head (several rows), while a one-row range of another
  // sequence groups its heads: it is the only one-row range, ceil(4 * 1 / (2 * 1)) = 2
  // KV heads per task.
  TestBatch b({{Tokens(66)}, {{5}, 3}});
  const StepPlan plan = PlanStep(b.batch, {.n_kv_heads = 4, .threads = 1});
  ASSERT_EQ(plan.attention_tasks.size(), 4u + 4u + 4u + 2u);
  EXPECT_EQ(plan.attention_tasks[7], (AttentionTask{0, 3, 1, 32, 64, kSgemm}));
  for (int h = 0; h < 4; ++h) {
    EXPECT_EQ(plan.attention_tasks[8 + h], (AttentionTask{0, h, 1, 64, 66, kPaged}));
  }
  EXPECT_EQ(plan.attention_tasks[12], (AttentionTask{1, 0, 2, 66, 67, kPaged}));
  EXPECT_EQ(plan.attention_tasks[13], (AttentionTask{1, 2, 2, 66, 67, kPaged}));
  ExpectTasksPartitionRowsAndHeads(plan, 4);
}

TEST(StepPlanTest, DecodeRowsOfManySequences) {
  // Three sequences, one new token each, at their own positions.
  TestBatch b({{{7}, 5}, {{8}, 0}, {{9}, 12}});
  const StepPlan plan = PlanStep(b.batch, {.n_kv_heads = 1, .threads = 2});
  EXPECT_THAT(plan.rows, ElementsAre(StepRow{0, 5, 7}, StepRow{1, 0, 8}, StepRow{2, 12, 9}));
  EXPECT_THAT(plan.attention_tasks, ElementsAre(AttentionTask{0, 0, 1, 0, 1, kPaged},
                                                AttentionTask{1, 0, 1, 1, 2, kPaged},
                                                AttentionTask{2, 0, 1, 2, 3, kPaged}));
  EXPECT_THAT(plan.logit_rows, ElementsAre(LogitRow{0, 0}, LogitRow{1, 1}, LogitRow{2, 2}));
}

TEST(StepPlanTest, MixedBatchOfPrefillAndDecode) {
  // A decode row, a 5-token prefill, another decode row: rows are stacked in batch order.
  TestBatch b({{{1}, 9}, {Tokens(5), 0}, {{2}, 3}});
  const StepPlan plan = PlanStep(b.batch, {.n_kv_heads = 2, .threads = 1});
  EXPECT_THAT(plan.rows, ElementsAre(StepRow{0, 9, 1}, StepRow{1, 0, 100}, StepRow{1, 1, 101},
                                     StepRow{1, 2, 102}, StepRow{1, 3, 103}, StepRow{1, 4, 104},
                                     StepRow{2, 3, 2}));
  // Two short ranges, 2 KV heads, 1 thread: ceil(2 * 2 / 2) = 2 heads per paged task.
  EXPECT_THAT(
      plan.attention_tasks,
      ElementsAre(AttentionTask{0, 0, 2, 0, 1, kPaged}, AttentionTask{1, 0, 1, 1, 6, kSgemm},
                  AttentionTask{1, 1, 1, 1, 6, kSgemm}, AttentionTask{2, 0, 2, 6, 7, kPaged}));
  EXPECT_THAT(plan.logit_rows, ElementsAre(LogitRow{0, 0}, LogitRow{5, 1}, LogitRow{6, 2}));
  ExpectTasksPartitionRowsAndHeads(plan, 2);
}

TEST(StepPlanTest, WantLogitsFalseSkipsTheSequencesLogitRow) {
  TestBatch b({{Tokens(4), 0, false}, {{3}, 2, true}, {{4}, 7, false}});
  const StepPlan plan = PlanStep(b.batch, {.n_kv_heads = 1, .threads = 1});
  ASSERT_EQ(plan.rows.size(), 6u);
  EXPECT_THAT(plan.logit_rows, ElementsAre(LogitRow{4, 1}));

  TestBatch none({{Tokens(4), 0, false}});
  const StepPlan no_logits = PlanStep(none.batch, {.n_kv_heads = 1, .threads = 1});
  EXPECT_EQ(no_logits.rows.size(), 4u);
  EXPECT_THAT(no_logits.logit_rows, IsEmpty());
}

TEST(StepPlanTest, ChunkedPrefillContinuesAfterCachedTokens) {
  // The second chunk of a prompt: 40 tokens after 24 cached ones. Positions start at 24;
  // the ranges are counted from the chunk's first row, not from position 0.
  TestBatch b({{Tokens(40), 24, true}});
  const StepPlan plan = PlanStep(b.batch, {.n_kv_heads = 1, .threads = 2});
  ASSERT_EQ(plan.rows.size(), 40u);
  EXPECT_EQ(plan.rows.front(), (StepRow{0, 24, 100}));
  EXPECT_EQ(plan.rows.back(), (StepRow{0, 63, 139}));
  EXPECT_THAT(plan.attention_tasks, ElementsAre(AttentionTask{0, 0, 1, 0, 32, kSgemm},
                                                AttentionTask{0, 0, 1, 32, 40, kSgemm}));
  EXPECT_THAT(plan.logit_rows, ElementsAre(LogitRow{39, 0}));
}

TEST(StepPlanTest, GroupsAdjacentKvHeadsOfDecodeTasks) {
  // s110m-like: 12 KV heads, 2 threads, so the target is 4 tasks.
  // One decode row: ceil(12 / 4) = 3 heads per task -> 4 tasks.
  TestBatch one({{{5}, 10}});
  const StepPlan p1 = PlanStep(one.batch, {.n_kv_heads = 12, .threads = 2});
  EXPECT_THAT(
      p1.attention_tasks,
      ElementsAre(AttentionTask{0, 0, 3, 0, 1, kPaged}, AttentionTask{0, 3, 3, 0, 1, kPaged},
                  AttentionTask{0, 6, 3, 0, 1, kPaged}, AttentionTask{0, 9, 3, 0, 1, kPaged}));
  // 16 decode rows: ceil(12 * 16 / 4) = 48, clamped to 12 -> one task per sequence.
  std::vector<TestBatch::Seq> seqs;
  for (int i = 0; i < 16; ++i) seqs.push_back({{i}, i});
  TestBatch sixteen(seqs);
  const StepPlan p16 = PlanStep(sixteen.batch, {.n_kv_heads = 12, .threads = 2});
  ASSERT_EQ(p16.attention_tasks.size(), 16u);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(p16.attention_tasks[i], (AttentionTask{i, 0, 12, i, i + 1, kPaged}));
  }
  // Heads that do not divide evenly: 5 KV heads, 1 thread -> ceil(5 / 2) = 3, then 2.
  const StepPlan p5 = PlanStep(one.batch, {.n_kv_heads = 5, .threads = 1});
  EXPECT_THAT(p5.attention_tasks, ElementsAre(AttentionTask{0, 0, 3, 0, 1, kPaged},
                                              AttentionTask{0, 3, 2, 0, 1, kPaged}));
  // Many threads never split below one head per task.
  const StepPlan p64 = PlanStep(one.batch, {.n_kv_heads = 2, .threads = 64});
  EXPECT_THAT(p64.attention_tasks, ElementsAre(AttentionTask{0, 0, 1, 0, 1, kPaged},
                                               AttentionTask{0, 1, 1, 0, 1, kPaged}));
  ExpectTasksPartitionRowsAndHeads(p1, 12);
  ExpectTasksPartitionRowsAndHeads(p16, 12);
  ExpectTasksPartitionRowsAndHeads(p5, 5);
}

TEST(StepPlanTest, ReplanningReusesThePlanAndForgetsTheLastStep) {
  TestBatch big({{Tokens(50), 0}, {{1}, 3}});
  TestBatch small({{{2}, 4, false}});
  StepPlan plan;
  PlanStep(big.batch, {.n_kv_heads = 3, .threads = 2}, plan);
  ExpectTasksPartitionRowsAndHeads(plan, 3);
  PlanStep(small.batch, {.n_kv_heads = 3, .threads = 2}, plan);
  EXPECT_THAT(plan.rows, ElementsAre(StepRow{0, 4, 2}));
  EXPECT_THAT(plan.logit_rows, IsEmpty());
  const StepPlan fresh = PlanStep(small.batch, {.n_kv_heads = 3, .threads = 2});
  EXPECT_EQ(plan.attention_tasks, fresh.attention_tasks);
  ExpectTasksPartitionRowsAndHeads(plan, 3);
}

// Many shapes of batches: the tasks always partition (row, KV head) pairs.
TEST(StepPlanTest, TasksPartitionEveryRowAndHead) {
  for (int n_kv_heads : {1, 2, 3, 8, 12}) {
    for (int threads : {1, 2, 7}) {
      for (int lengths_seed = 0; lengths_seed < 6; ++lengths_seed) {
        std::vector<TestBatch::Seq> seqs;
        for (int i = 0; i < 1 + lengths_seed; ++i) {
          const int n = 1 + (i * 29 + lengths_seed * 13) % 75;
          seqs.push_back({Tokens(n), i * 3, i % 2 == 0});
        }
        TestBatch b(seqs);
        SCOPED_TRACE(::testing::Message() << "n_kv_heads=" << n_kv_heads << " threads=" << threads
                                          << " seed=" << lengths_seed);
        const StepPlan plan = PlanStep(b.batch, {.n_kv_heads = n_kv_heads, .threads = threads});
        ExpectTasksPartitionRowsAndHeads(plan, n_kv_heads);
        size_t row = 0;
        for (size_t s = 0; s < seqs.size(); ++s) {
          for (size_t t = 0; t < seqs[s].tokens.size(); ++t, ++row) {
            ASSERT_EQ(plan.rows[row],
                      (StepRow{static_cast<int>(s), seqs[s].cached + static_cast<int>(t),
                               seqs[s].tokens[t]}));
          }
        }
        EXPECT_EQ(row, plan.rows.size());
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::backends::cpu_blas
