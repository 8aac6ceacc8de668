// Multi-head latent attention (ModelConfig::mla()) of one cpu_blas step, in the
// absorbed form of kernels::AttendLatentAbsorbed, with the SIMD kernels and the
// Gemm instead of the scalar oracle:
//   1. q_lat[h, r] = [W_kb_h q_nope(r, h) ‖ q_pe(r, h)] for every row r and
//   head h: the
//      absorptions of all heads as one Gemm::RunGroups (one product per head,
//      over the rows' q_nope of that head);
//   2. per row and head, scores = scale * q_lat · row(t) over the row's visible
//   cached
//      latents (KernelSet::dot_rows, width kv_lora_rank + rope_dim), softmax,
//      and o_lat[h, r] = sum_t att[t] c(t) (axpy_rows over the first
//      kv_lora_rank elements), blocks outer and a task's heads inner, so a
//      thread reads each KV block once for all its heads;
//   3. att_out[r, h] = W_vb_h o_lat[h, r]: one RunGroups (a product per head).
// The result equals the oracle's up to float summation order and, for quantized
// W_kb and W_vb, the 8-bit activations the Gemm multiplies them with (gemm.h).
#ifndef KVSERVE_BACKENDS_CPU_BLAS_LATENT_ATTENTION_H_
#define KVSERVE_BACKENDS_CPU_BLAS_LATENT_ATTENTION_H_

#include <vector>

#include "backends/backend.h"
#include "backends/cpu_blas/gemm.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "backends/cpu_blas/step_plan.h"
#include "backends/cpu_blas/thread_pool.h"
#include "model/kv_layout.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace kvserve::backends::cpu_blas {

// Owns its scratch; holds the rest by pointer or reference.
// Threading: Run uses the pool and the Gemm, so like ThreadPool::Run one caller
// at a time.
class LatentAttention {
 public:
  // Everything must outlive the object. Precondition: config.mla(), and
  // `layout` fits `config` (ValidateKvLayout).
  LatentAttention(const model::ModelConfig& config, const model::KvLayout& layout,
                  const KernelSet* kernels, ThreadPool* pool, Gemm* gemm);

  // Latent attention of layer `layer` for every row of `plan` (row r: sequence
  // plan.rows[r].seq at position p = plan.rows[r].pos, seeing positions
  // [FirstVisiblePosition(p), p]). q: [rows, q_dim] queries after RoPE;
  // att_out: [rows, attn_out_dim]. Preconditions: the latent rows of every
  // visible position (the step's own rows included) are in the blocks; block
  // pointers are aligned to the KV element.
  void Run(const Batch& batch, const StepPlan& plan, const model::LayerWeights& L, int layer,
           const float* q, float* att_out);

 private:
  // y = the per-head products of head h's rows of w (rows_per_head of them) with x's
  // rows [h * n, (h + 1) * n), for every head, as one Gemm::RunGroups. x: [heads * n,
  // w.cols]; y: [heads * n, rows_per_head].
  void RunPerHead(const model::TensorView& w, int rows_per_head, const float* x, int n, float* y);
  // Step 2 for row `row` and heads [h0, h1), weights in `att` (grown as
  // needed).
  void Attend(const Batch& batch, const StepPlan& plan, int layer, int row, int h0, int h1,
              std::vector<float>& att);

  const model::ModelConfig& config_;
  const model::KvLayout layout_;
  const KernelSet* kernels_;
  ThreadPool* pool_;
  Gemm* gemm_;
  std::vector<model::TensorView> views_;     // one per head: its rows of W_kb or W_vb
  std::vector<Gemm::RowsProduct> products_;  // one per head
  std::vector<float> q_nope_;                // [heads, rows, qk_nope]: the absorptions' activations
  std::vector<float> absorbed_;              // [heads, rows, r]: W_kb_h q_nope
  std::vector<float> q_lat_;                 // [heads, rows, r + rope_dim]
  std::vector<float> o_lat_;                 // [heads, rows, r]
  std::vector<float> v_out_;                 // [heads, rows, v_head_dim]
  std::vector<std::vector<float>> att_;      // per pool thread: [heads, positions] weights
};

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_LATENT_ATTENTION_H_
