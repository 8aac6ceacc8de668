// Causal attention of one cpu_blas step over the sequences' paged K/V, task by task as
// PlanStep split it (step_plan.h), on the backend's thread pool.
//
// Two paths, chosen per task by AttentionTask::path:
// - kPaged (decode rows, and prefill chunks under batch invariance): per query row, scores
//   with dot_rows over each KV block's rows and the weighted sum with axpy_rows, reading
//   K/V in place (f32 or f16); a pass of several rows whose queries fill two of the
//   kernels' tiles widens f16 K/V to f32 once per span of blocks instead (exact: the same
//   bits). Blocks are the outer loop and the task's heads the inner one, so a pass reads
//   one contiguous slice of every cached row.
// - kSgemm (prefill chunks): the task's KV head is gathered to f32 for positions
//   [first, n_ctx) of its rows, then S = scale * Q K^T and O = softmax(S) V are two sgemm
//   products with the group's query heads stacked as rows; each row's weights past its
//   own position, or before its window, are zero (causal and local masks).
// Both compute the reference formula (backends/kernels/attention.h, AttendOneQuery) up
// to float summation order.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_ATTENTION_H_
#define KVSERVE_BACKENDS_CPU_BLAS_ATTENTION_H_

#include <vector>

#include "backends/backend.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "backends/cpu_blas/step_plan.h"
#include "backends/cpu_blas/thread_pool.h"
#include "backends/kernels/kv_rows.h"
#include "model/kv_layout.h"
#include "model/model_config.h"

namespace kvserve::backends::cpu_blas {

// Owns per-thread scratch; holds the rest by reference.
// Threading: Run uses the pool, so like ThreadPool::Run one caller at a time.
class PagedAttention {
 public:
  // `config`, `layout`, `kernels` and `pool` must outlive the object. Precondition:
  // `layout` fits `config` (ValidateKvLayout).
  PagedAttention(const model::ModelConfig& config, const model::KvLayout& layout,
                 const KernelSet* kernels, ThreadPool* pool);

  // Attention of layer `layer` for every task of `plan`. For each stacked row r of a
  // task (sequence s = plan.rows[r].seq, position p = plan.rows[r].pos) and each query
  // head h of the task, with g = h / (n_heads / n_kv_heads) and f = the config's
  // FirstVisiblePosition(p) (0 without a sliding window):
  //   att_out[r, h] = sum_{f <= t <= p} softmax_t(scale * q[r, h] · K[s, t, g]) * V[s, t, g]
  // Positions before f are never read (their blocks may be null).
  // where scale = the config's AttentionScale() (1 / sqrt(head_dim)) and K/V are layer
  // `layer` of sequence s's blocks.
  // q: [rows, q_dim] queries after RoPE; att_out: [rows, q_dim]. Each task writes exactly
  // its rows' slices of its heads, so tasks never overlap.
  //
  // Preconditions: `plan` is PlanStep's plan of `batch` for this model's n_kv_heads;
  // K/V of every position [0, p] of each row (the step's own rows included) are already
  // in the blocks; block pointers are aligned to the KV element (CpuBlasBackend::Forward
  // checks this). Small steps (total multiply-adds below a threshold) run on the caller,
  // the rest as one pool loop over the tasks.
  void Run(const Batch& batch, const StepPlan& plan, int layer, const float* q, float* att_out);

 private:
  // Per pool thread.
  struct Scratch {
    std::vector<float> scores;  // [heads, positions] weights of the task's heads (kPaged)
    std::vector<float> block;   // [block tokens, task heads x head_dim] f16 K or V widened (kPaged)
    std::vector<float> q;       // [rows * group, head_dim] stacked queries (kSgemm)
    std::vector<float> k;       // [positions, head_dim] keys of one KV head (kSgemm)
    std::vector<float> v;       // [positions, head_dim] values of one KV head (kSgemm)
    std::vector<float> s;       // [rows * group, positions] scores, then weights (kSgemm)
    std::vector<float> o;       // [rows * group, head_dim] outputs (kSgemm)
  };
  // What every task of one Run reads and writes.
  struct Step {
    const Batch& batch;
    const StepPlan& plan;
    int layer;
    const float* q;
    float* att_out;
    // kPaged asks for the next K/V block ahead (PrefetchSlice) on the caller alone;
    // passes of several rows do so on any thread (AttendPaged).
    bool prefetch = false;
  };

  void RunTask(const Step& step, const AttentionTask& task, Scratch& scratch) const;
  void AttendPaged(const Step& step, const AttentionTask& task, Scratch& scratch) const;
  void AttendSgemm(const Step& step, const AttentionTask& task, Scratch& scratch) const;
  // out[t - first, 0:kv_heads * head_dim) = K or V of KV heads [kv_head, kv_head +
  // kv_heads) at position t (adjacent in a cached row), as f32, for t in [first, n_pos).
  void GatherHeads(const kernels::SequenceKv& kv, int layer, kernels::KvKind kind, int kv_head,
                   int kv_heads, int first, int n_pos, float* out) const;

  const model::ModelConfig& config_;
  const model::KvLayout& layout_;
  const KernelSet* kernels_;
  ThreadPool* pool_;
  std::vector<Scratch> scratch_;  // one per pool thread
};

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_ATTENTION_H_
