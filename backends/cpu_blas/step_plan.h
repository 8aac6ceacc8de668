// The plan of one cpu_blas Forward step: everything the backend decides about a batch
// before any arithmetic, as plain data. Every new token of every sequence becomes one
// stacked activation row; attention is split into tasks per (sequence, KV heads, range of
// query rows); the LM head runs only on each sequence's last row when it wants logits.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_STEP_PLAN_H_
#define KVSERVE_BACKENDS_CPU_BLAS_STEP_PLAN_H_

#include <cstdint>
#include <vector>

#include "backends/backend.h"

namespace kvserve::backends::cpu_blas {

// Query rows per attention task: bounds the imbalance of a long prefill chunk.
inline constexpr int kAttentionRowsPerTask = 32;
// Tasks with at least this many query rows (a prefill chunk) attend with two sgemm
// products over the task's gathered K/V head slice; fewer rows (decode) use the
// per-position SIMD dot/axpy kernels, which read K/V in place without a gather.
inline constexpr int kAttentionSgemmMinRows = 4;

// One stacked activation row: a new token of one sequence.
struct StepRow {
  int seq = 0;        // index in Batch::sequences
  int pos = 0;        // absolute position in that sequence (cached_tokens + index)
  int32_t token = 0;  // its token id
  bool operator==(const StepRow&) const = default;
};

// How an attention task runs (see attention.h).
enum class AttentionPath : uint8_t {
  kPaged,  // per query row, dot/axpy over the paged K/V in place; any number of KV heads
  kSgemm,  // one KV head gathered to f32, two sgemm products over all of the task's rows
};

// One unit of attention work: stacked query rows [row_begin, row_end), all of sequence
// `seq` at consecutive positions, times the query heads that read KV heads
// [kv_head, kv_head + kv_heads) (query heads [kv_head * group, (kv_head + kv_heads) *
// group) with group = n_heads / n_kv_heads). kSgemm tasks hold one KV head.
struct AttentionTask {
  int seq = 0;
  int kv_head = 0;
  int kv_heads = 1;
  int row_begin = 0;
  int row_end = 0;
  AttentionPath path = AttentionPath::kPaged;
  bool operator==(const AttentionTask&) const = default;
};

// A row that goes through the final norm and the LM head, and where its logits go.
struct LogitRow {
  int row = 0;   // stacked row of a new token whose logits are wanted
  int slot = 0;  // its row in the step's logits (backends::LogitRowStarts)
  bool operator==(const LogitRow&) const = default;
};

struct StepPlan {
  // Rows of every sequence in batch order, each sequence's in position order.
  std::vector<StepRow> rows;
  // Per sequence in batch order: its row ranges of kAttentionRowsPerTask rows (the last
  // one shorter), and per range its KV heads in order. Together the tasks cover every
  // (row, KV head) pair exactly once.
  std::vector<AttentionTask> attention_tasks;
  // One per sequence with want_logits (and at least one token), in batch order.
  std::vector<LogitRow> logit_rows;
};

// What the plan depends on besides the batch.
struct StepPlanOptions {
  int n_kv_heads = 1;  // the model's KV heads, >= 1
  int threads = 1;     // threads that will run the attention tasks, >= 1
  // Ranges of kAttentionSgemmMinRows rows or more take the kSgemm path; false: every
  // range takes kPaged, so each query row is computed alike whatever its chunk
  // (GemmOptions::batch_invariant).
  bool sgemm_attention = true;
};

// Plans `batch` into `plan` (its previous contents are discarded, its capacity reused).
//
// Attention tasks: with options.sgemm_attention, a range of at least
// kAttentionSgemmMinRows rows takes the kSgemm path, one task per KV head. Other ranges take
// the kPaged path: a range of several rows (a prefill chunk, a draft's verification rows) one
// task per KV head too (its passes prefetch the head's K/V and keep their scores small,
// attention.cc); ranges of one row (decode) group adjacent KV heads, so that a task reads one
// contiguous slice of each cached row: ceil(n_kv_heads * one_row_ranges / (2 * threads)) heads
// per task, clamped to [1, n_kv_heads] (about two tasks per thread overall; the last group of a
// range may be smaller). E.g. 12 KV heads, 2 threads: one decode row -> 4 tasks of 3 heads; 16
// decode rows -> one task per sequence.
//
// Pure: depends only on its arguments; reads the batch's tokens and flags, never its
// blocks. Precondition: the batch passed ValidateBatch (positions fit in an int).
void PlanStep(const Batch& batch, const StepPlanOptions& options, StepPlan& plan);

// The same, into a new plan.
StepPlan PlanStep(const Batch& batch, const StepPlanOptions& options);

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_STEP_PLAN_H_
