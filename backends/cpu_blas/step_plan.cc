#include "backends/cpu_blas/step_plan.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace kvserve::backends::cpu_blas {
namespace {

// Rows of a range that starts `begin` rows into a sequence of `n` new tokens.
int64_t RangeRows(int64_t n, int64_t begin) {
  return std::min<int64_t>(kAttentionRowsPerTask, n - begin);
}

// KV heads per kPaged task of one row (see PlanStep).
int PagedKvHeadsPerTask(const Batch& batch, int n_kv_heads, int threads) {
  int64_t one_row_ranges = 0;
  for (const SequenceInput& seq : batch.sequences) {
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    for (int64_t r = 0; r < n; r += kAttentionRowsPerTask) {
      if (RangeRows(n, r) == 1) ++one_row_ranges;
    }
  }
  const int64_t target = 2 * static_cast<int64_t>(threads);
  return static_cast<int>(
      std::clamp<int64_t>((n_kv_heads * one_row_ranges + target - 1) / target, 1, n_kv_heads));
}

}  // namespace

void PlanStep(const Batch& batch, const StepPlanOptions& options, StepPlan& plan) {
  plan.rows.clear();
  plan.attention_tasks.clear();
  plan.logit_rows.clear();
  const int n_kv_heads = options.n_kv_heads;
  const int paged_heads = PagedKvHeadsPerTask(batch, n_kv_heads, options.threads);
  int slot = 0;  // the first logits row of sequence i
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceInput& seq = batch.sequences[i];
    const int s = static_cast<int>(i);
    const int first = static_cast<int>(plan.rows.size());
    for (size_t t = 0; t < seq.tokens.size(); ++t) {
      plan.rows.push_back({s, seq.cached_tokens + static_cast<int>(t), seq.tokens[t]});
    }
    const int last = static_cast<int>(plan.rows.size());
    for (int r = first; r < last; r += kAttentionRowsPerTask) {
      const int end = std::min(last, r + kAttentionRowsPerTask);
      const bool sgemm = options.sgemm_attention && end - r >= kAttentionSgemmMinRows;
      // A paged range of several rows (a prefill chunk with batch invariance, a draft's
      // verification) reads the K/V head by head, prefetched (attention.cc): its passes
      // then read each block once per KV head and keep their scores small.
      const int heads = sgemm || end - r > 1 ? 1 : paged_heads;
      const AttentionPath path = sgemm ? AttentionPath::kSgemm : AttentionPath::kPaged;
      for (int h = 0; h < n_kv_heads; h += heads) {
        plan.attention_tasks.push_back({s, h, std::min(heads, n_kv_heads - h), r, end, path});
      }
    }
    if (seq.want_logits && last > first) {
      const int rows = std::clamp(seq.logits_rows, 1, last - first);
      for (int k = 0; k < rows; ++k) plan.logit_rows.push_back({last - rows + k, slot + k});
    }
    slot += seq.logits_rows;
  }
}

StepPlan PlanStep(const Batch& batch, const StepPlanOptions& options) {
  StepPlan plan;
  PlanStep(batch, options, plan);
  return plan;
}

}  // namespace kvserve::backends::cpu_blas
