#include "backends/cpu_blas/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvserve::backends::cpu_blas {

using kernels::KvKind;

namespace {

// Query rows of a kPaged task that go over the K/V blocks together (AttendPaged): as many
// as the task has, up to kAttentionRowsPerTask, so that each K/V block is read once for
// all of them, as long as their scores (rows x the task's query heads x positions floats,
// written by the dot pass, read by softmax and the weighted sums) fit kPagedPassScoreBytes
// and stay in L2; at least kPagedMinRowsPerPass. With one KV head per task for such
// ranges (step_plan.cc), against 8 rows per pass and grouped heads, s110m f32: 16 rows
// after 4,096 cached positions 0.88x the step's time, 512 rows after 3,584 0.94x
// (kernels_bench BM_PrefillAfterContext, medians of 4 alternated rounds).
constexpr int kPagedMinRowsPerPass = 8;
constexpr size_t kPagedPassScoreBytes = size_t{512} << 10;
int PagedRowsPerPass(int query_heads, int positions) {
  const size_t per_row =
      static_cast<size_t>(query_heads) * static_cast<size_t>(std::max(positions, 1)) * 4;
  return static_cast<int>(std::clamp<size_t>(kPagedPassScoreBytes / per_row, kPagedMinRowsPerPass,
                                             kAttentionRowsPerTask));
}

// Queries sharing each f16 K/V block in a pass from which AttendPaged widens the block to
// f32 once for all of them: at least two of the kernels' tiles of queries (2 or 4 each).
constexpr int kWidenMinQueries = 8;
// Bytes of widened K or V a span of the kernels covers at most (whole blocks, at least
// one): within L1 beside the queries' sums.
constexpr size_t kWidenSpanBytes = size_t{32} << 10;

// Steps with fewer multiply-adds than this (tiny models, one decode row) run on the
// caller: waking the pool costs more than the work.
constexpr int64_t kMinParallelWork = 32 * 1024;

void Grow(std::vector<float>& v, size_t size) {
  if (v.size() < size) v.resize(size);
}

// Asks for bytes [offset, offset + bytes) of `rows` rows, row_bytes apart from `plane`,
// to be brought into cache. Decode attention reads K and V rows a step after they were
// written, with the whole model's weights streamed in between: every row is a miss, and
// in a short context the dot and axpy kernels wait for each in turn. Asked for a block
// ahead, the misses overlap (s110m q4_0, batch 1, 32 positions: 7.5 -> 5.2-5.8 us per
// layer). For decode rows only when the caller runs every task alone: with the pool's
// threads prefetching side by side, attention ran slower with it than without (s110m q8_0,
// batch 16, 32 positions, ms per step, 3 rounds: 0.76 / 0.77 / 0.76 -> 0.67 / 0.67 / 0.68
// without; 128 positions 2.30 / 2.20 -> 1.88 / 1.84; L2 or non-temporal hints in between).
// Passes of several rows (a prefill chunk after a cached context) prefetch on every thread:
// s110m f32, 16 new rows after 4,096 cached positions, the step's attention took about
// 0.6x the time with it (kernels_bench BM_PrefillAfterContext, with the vector stores of
// DotRowsTile).
void PrefetchSlice(const uint8_t* plane, int rows, size_t row_bytes, size_t offset, size_t bytes) {
  for (int t = 0; t < rows; ++t) {
    const uint8_t* row = plane + static_cast<size_t>(t) * row_bytes + offset;
    for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 3);
  }
}

// The queries (query vectors or attention weights) and outputs of one dot_rows or
// axpy_rows call: query heads that read the same K or V rows.
struct Queries {
  static constexpr int kMax = 32;
  const float* in[kMax];
  float* out[kMax];
  int n = 0;
};

}  // namespace

PagedAttention::PagedAttention(const model::ModelConfig& config, const model::KvLayout& layout,
                               const KernelSet* kernels, ThreadPool* pool)
    : config_(config),
      layout_(layout),
      kernels_(kernels),
      pool_(pool),
      scratch_(static_cast<size_t>(pool->size())) {}

void PagedAttention::Run(const Batch& batch, const StepPlan& plan, int layer, const float* q,
                         float* att_out) {
  int64_t work = 0;
  for (const AttentionTask& t : plan.attention_tasks) {
    for (int j = t.row_begin; j < t.row_end; ++j) {
      const int pos = plan.rows[j].pos;
      work += int64_t{pos + 1 - config_.FirstVisiblePosition(pos)} * t.kv_heads;
    }
  }
  work *= static_cast<int64_t>(config_.head_dim) * (config_.n_heads / config_.n_kv_heads) * 2;
  const bool alone = work < kMinParallelWork;
  const Step step{batch, plan, layer, q, att_out, /*prefetch=*/alone};
  if (alone) {
    for (const AttentionTask& t : plan.attention_tasks) RunTask(step, t, scratch_[0]);
    return;
  }
  pool_->Run(static_cast<int64_t>(plan.attention_tasks.size()), [&](int64_t task, int thread) {
    RunTask(step, plan.attention_tasks[static_cast<size_t>(task)],
            scratch_[static_cast<size_t>(thread)]);
  });
}

void PagedAttention::RunTask(const Step& step, const AttentionTask& task, Scratch& sc) const {
  switch (task.path) {
    case AttentionPath::kSgemm:
      AttendSgemm(step, task, sc);
      return;
    case AttentionPath::kPaged:
      AttendPaged(step, task, sc);
      return;
  }
}

void PagedAttention::AttendPaged(const Step& step, const AttentionTask& task, Scratch& sc) const {
  std::vector<float>& att = sc.scores;
  const model::ModelConfig& c = config_;
  const kernels::SequenceKv kv(layout_, step.batch.sequences[task.seq].blocks);
  const int hd = c.head_dim;
  const int group = c.n_heads / c.n_kv_heads;
  const int q_dim = c.q_dim();
  const float scale = c.AttentionScale();
  const bool f16 = layout_.dtype == model::DType::kF16;
  const size_t head_bytes = static_cast<size_t>(hd) * (f16 ? 2 : 4);
  const size_t row_bytes = layout_.row_bytes();
  const int bt = layout_.block_tokens;
  // The task's query heads: [h_begin, h_begin + n_heads), adjacent within a row, and their
  // KV heads adjacent within a cached row. Blocks are the outer loop and heads the inner
  // one, so each pass reads one contiguous slice of every cached row (all the task's
  // heads) instead of one head's 64 floats per row across the whole context.
  const int h_begin = task.kv_head * group;
  const int n_heads = task.kv_heads * group;
  const size_t slice_offset = static_cast<size_t>(task.kv_head) * head_bytes;
  const size_t slice_bytes = static_cast<size_t>(task.kv_heads) * head_bytes;

  // Up to PagedRowsPerPass query rows (consecutive positions of the sequence) go over the
  // K/V blocks together, so a block read for the first is still in cache for the others
  // (a prefill chunk's rows would otherwise each stream the whole context from L3). Each
  // row sees its own positions [first_r, pos_r] in the same segments (the blocks cut at
  // its window) and the same results as when it runs alone (the kernels' queries do not
  // mix): a row's result does not depend on the rows beside it (batch invariance). Rows
  // that see the same positions of a block, and the query heads of one KV head, share
  // each kernel call, which loads every K and V vector once for several of them.
  const int last_pos = step.plan.rows[task.row_end - 1].pos;
  const int rows_per_pass =
      PagedRowsPerPass(n_heads, last_pos + 1 - c.FirstVisiblePosition(last_pos));
  // f16 K/V read by many queries of several rows (a prefill chunk after a cached context;
  // decode rows stay as they were) are widened to f32 once per span and pass (sc.block)
  // instead of once per tile of queries in the kernels: the same values (the widening is
  // exact) through the same vector code, so the same scores and outputs bit for bit,
  // with fewer conversions on the FMA ports. Only for a head_dim that leaves no scalar
  // tail at any level (16 lanes or fewer): the f16 and f32 kernels' scalar tails may
  // round differently (the compiler contracts them into FMAs as it sees fit;
  // batch_invariance_test's 24-wide heads at the AVX-512 levels).
  const int pass_rows = std::min(task.row_end - task.row_begin, rows_per_pass);
  const bool widen = f16 && hd % 16 == 0 && pass_rows > 1 && pass_rows * group >= kWidenMinQueries;
  const size_t slice_floats = static_cast<size_t>(task.kv_heads) * static_cast<size_t>(hd);
  if (widen) {
    Grow(sc.block,
         std::max(kWidenSpanBytes / sizeof(float), static_cast<size_t>(bt) * slice_floats));
  }
  const auto dot_rows = f16 && !widen ? kernels_->dot_rows_f16 : kernels_->dot_rows_f32;
  const auto axpy_rows = f16 && !widen ? kernels_->axpy_rows_f16 : kernels_->axpy_rows_f32;
  for (int g0 = task.row_begin; g0 < task.row_end; g0 += rows_per_pass) {
    const int g1 = std::min(task.row_end, g0 + rows_per_pass);
    struct RowView {
      int first;
      int n_pos;
      size_t n_vis;
      size_t att;  // offset of its [n_heads, n_vis] weights in `att`
    };
    RowView rv[kAttentionRowsPerTask];
    size_t total = 0;
    for (int j = g0; j < g1; ++j) {
      RowView& r = rv[j - g0];
      r.n_pos = step.plan.rows[j].pos + 1;
      r.first = c.FirstVisiblePosition(r.n_pos - 1);
      r.n_vis = static_cast<size_t>(r.n_pos - r.first);
      r.att = total;
      total += static_cast<size_t>(n_heads) * r.n_vis;
    }
    Grow(att, total);
    // Positions some row of the pass sees: the first row's first, the last row's last.
    const int lo = rv[0].first;
    const int hi = rv[g1 - g0 - 1].n_pos;

    // The K and V span after the one being read are prefetched (K's first span, and V's
    // first after K's last) on the caller alone (Step::prefetch), and for a pass of
    // several rows (a prefill chunk after a cached context) on any thread: its blocks
    // come from memory (the step's weights went through the caches since they were
    // last read), and each block's work is short, so without the hint every pass waits
    // for each row's lines in turn (kernels_bench BM_PrefillAfterContext).
    const bool prefetch = step.prefetch || g1 - g0 > 1;
    // The kernels go over spans of positions: one block in place; with `widen`, up to
    // kWidenSpanBytes of whole blocks where every row of the pass sees all of them
    // ([common_lo, common_hi)), so that each tile of queries keeps its sums in registers
    // over the span instead of storing and reloading them at every block (the same sums
    // in the same order: only the kernel calls are fewer). Any span would give the same
    // results (for_each_run splits the rows by their ranges within it); past the common
    // range the rows' runs would be single rows, so there spans are one block.
    const int common_lo = rv[g1 - g0 - 1].first;
    const int common_hi = rv[0].n_pos;
    const int span_blocks =
        widen ? std::max<int>(1, static_cast<int>(kWidenSpanBytes / (static_cast<size_t>(bt) *
                                                                     slice_floats * sizeof(float))))
              : 1;
    auto span_end = [&](int t0) {
      const int block_end = std::min(hi, (t0 / bt + 1) * bt);
      if (span_blocks == 1 || t0 < common_lo || t0 >= common_hi) return block_end;
      return std::min(std::min(hi, (t0 / bt + span_blocks) * bt),
                      std::max(block_end, common_hi / bt * bt));
    };
    auto prefetch_span = [&](KvKind kind, int t0) {
      if (!prefetch || t0 >= hi) return;
      const int end = span_end(t0);
      for (int b0 = t0; b0 < end;) {
        const int b1 = std::min(end, (b0 / bt + 1) * bt);
        PrefetchSlice(kv.Row(step.layer, kind, b0), b1 - b0, row_bytes, slice_offset, slice_bytes);
        b0 = b1;
      }
    };
    // Calls fn(m0, m1, a, b) for each run of rows [m0, m1) whose part of positions [t0, t1)
    // is the same [a, b) (all the rows of a pass but at the causal diagonal and a window's
    // start).
    auto for_each_run = [&](int t0, int t1, auto&& fn) {
      const int n_rows = g1 - g0;
      for (int m = 0; m < n_rows;) {
        const int a = std::max(t0, rv[m].first);
        const int b = std::min(t1, rv[m].n_pos);
        int e = m + 1;
        while (e < n_rows && std::max(t0, rv[e].first) == a && std::min(t1, rv[e].n_pos) == b) ++e;
        if (a < b) fn(m, e, a, b);
        m = e;
      }
    };
    // Where kernels read the task's K or V rows of span [t0, t1) from position a on: in
    // place, or widened to f32 in sc.block (`widen` above).
    struct Source {
      const uint8_t* first_head;  // the task's first KV head at position a
      size_t stride;              // bytes from one position to the next
      size_t head_step;           // bytes from one KV head to the next
    };
    auto source = [&](KvKind kind, int t0, int a) {
      if (widen) {
        return Source{reinterpret_cast<const uint8_t*>(sc.block.data() +
                                                       static_cast<size_t>(a - t0) * slice_floats),
                      slice_floats * sizeof(float), static_cast<size_t>(hd) * sizeof(float)};
      }
      return Source{kv.Row(step.layer, kind, a) + slice_offset, row_bytes, head_bytes};
    };
    // With `widen`, span [t0, t1)'s slice of every row into sc.block as f32.
    auto widen_span = [&](KvKind kind, int t0, int t1) {
      if (widen) {
        GatherHeads(kv, step.layer, kind, task.kv_head, task.kv_heads, t0, t1, sc.block.data());
      }
    };
    // For each of the task's KV heads, gathers the query heads of rows [m0, m1) that read
    // it (with_row(m, i, list) appends row m's task head i) and calls kernel(list, the KV
    // head's rows, their stride), Queries::kMax at a time.
    auto for_each_kv_head = [&](int m0, int m1, const Source& src, auto&& with_row, auto&& kernel) {
      Queries list;
      for (int kh = 0; kh < task.kv_heads; ++kh) {
        const uint8_t* head = src.first_head + static_cast<size_t>(kh) * src.head_step;
        for (int m = m0; m < m1; ++m) {
          for (int g = 0; g < group; ++g) {
            with_row(m, kh * group + g, list);
            if (list.n == Queries::kMax) {
              kernel(list, head, src.stride);
              list.n = 0;
            }
          }
        }
        if (list.n > 0) kernel(list, head, src.stride);
        list.n = 0;
      }
    };
    prefetch_span(KvKind::kKey, lo);
    // scores[h][t - first] = scale * q_h · K[t][kv_head(h)], one span's rows at a time.
    for (int t0 = lo; t0 < hi;) {
      const int t1 = span_end(t0);
      if (t1 < hi) {
        prefetch_span(KvKind::kKey, t1);
      } else {
        prefetch_span(KvKind::kValue, lo);
      }
      widen_span(KvKind::kKey, t0, t1);
      for_each_run(t0, t1, [&](int m0, int m1, int a, int b) {
        for_each_kv_head(
            m0, m1, source(KvKind::kKey, t0, a),
            [&](int m, int i, Queries& list) {
              list.in[list.n] = step.q + static_cast<size_t>(g0 + m) * q_dim +
                                static_cast<size_t>(h_begin + i) * hd;
              list.out[list.n++] = att.data() + rv[m].att + i * rv[m].n_vis + (a - rv[m].first);
            },
            [&](const Queries& list, const uint8_t* head, size_t stride) {
              dot_rows(list.in, list.out, list.n, head, stride, b - a, hd, scale);
            });
      });
      t0 = t1;
    }
    for (int m = 0; m < g1 - g0; ++m) {
      float* oj = step.att_out + static_cast<size_t>(g0 + m) * q_dim;
      for (int i = 0; i < n_heads; ++i) {
        kernels_->softmax(att.data() + rv[m].att + i * rv[m].n_vis,
                          static_cast<int64_t>(rv[m].n_vis));
      }
      std::fill(oj + static_cast<size_t>(h_begin) * hd,
                oj + static_cast<size_t>(h_begin + n_heads) * hd, 0.0f);
    }
    // out_h = sum_t att[h][t - first] * V[t][kv_head(h)]
    for (int t0 = lo; t0 < hi;) {
      const int t1 = span_end(t0);
      prefetch_span(KvKind::kValue, t1);
      widen_span(KvKind::kValue, t0, t1);
      for_each_run(t0, t1, [&](int m0, int m1, int a, int b) {
        for_each_kv_head(
            m0, m1, source(KvKind::kValue, t0, a),
            [&](int m, int i, Queries& list) {
              list.in[list.n] = att.data() + rv[m].att + i * rv[m].n_vis + (a - rv[m].first);
              list.out[list.n++] = step.att_out + static_cast<size_t>(g0 + m) * q_dim +
                                   static_cast<size_t>(h_begin + i) * hd;
            },
            [&](const Queries& list, const uint8_t* head, size_t stride) {
              axpy_rows(list.in, list.out, list.n, head, stride, b - a, hd);
            });
      });
      t0 = t1;
    }
  }
}

void PagedAttention::GatherHeads(const kernels::SequenceKv& kv, int layer, KvKind kind, int kv_head,
                                 int kv_heads, int first, int n_pos, float* out) const {
  const bool f16 = layout_.dtype == model::DType::kF16;
  const size_t n = static_cast<size_t>(kv_heads) * static_cast<size_t>(config_.head_dim);
  const size_t offset_bytes =
      static_cast<size_t>(kv_head) * static_cast<size_t>(config_.head_dim) * (f16 ? 2 : 4);
  const size_t row_bytes = layout_.row_bytes();
  const int bt = layout_.block_tokens;
  for (int t0 = first; t0 < n_pos;) {
    const uint8_t* plane = kv.Row(layer, kind, t0) + offset_bytes;
    const int t1 = std::min(n_pos, (t0 / bt + 1) * bt);
    for (int t = t0; t < t1; ++t) {
      const uint8_t* src = plane + static_cast<size_t>(t - t0) * row_bytes;
      float* dst = out + static_cast<size_t>(t - first) * n;
      if (f16) {
        kernels_->f16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, static_cast<int64_t>(n));
      } else {
        std::memcpy(dst, src, n * sizeof(float));
      }
    }
    t0 = t1;
  }
}

// All rows of the task belong to one sequence at consecutive positions, so together they
// see positions [first, n_ctx): first = the first row's first visible position, n_ctx =
// the last row's position + 1; row r sees [first_r, pos_r] (first_r = 0 without a sliding
// window). With the query heads of the KV head stacked as rows (row i = query row j, head
// g: i = (j - row_begin) * group + g):
//   S = scale * Q · K[first:n_ctx]^T,  mask and softmax per row,  O = S · V[first:n_ctx].
void PagedAttention::AttendSgemm(const Step& step, const AttentionTask& task, Scratch& sc) const {
  const model::ModelConfig& c = config_;
  const kernels::SequenceKv kv(layout_, step.batch.sequences[task.seq].blocks);
  const std::vector<StepRow>& rows = step.plan.rows;
  const int hd = c.head_dim;
  const int group = c.n_heads / c.n_kv_heads;
  const size_t q_dim = static_cast<size_t>(c.q_dim());
  const size_t head_bytes = static_cast<size_t>(hd) * sizeof(float);
  const int m = (task.row_end - task.row_begin) * group;
  const int first = c.FirstVisiblePosition(rows[task.row_begin].pos);
  const int n_ctx = rows[task.row_end - 1].pos + 1;
  const int n_cols = n_ctx - first;  // positions some row of the task sees
  const size_t um = static_cast<size_t>(m);
  const size_t un_ctx = static_cast<size_t>(n_cols);
  const size_t uhd = static_cast<size_t>(hd);
  Grow(sc.q, um * uhd);
  Grow(sc.k, un_ctx * uhd);
  Grow(sc.v, un_ctx * uhd);
  Grow(sc.s, um * un_ctx);
  Grow(sc.o, um * uhd);

  // The group's query heads are adjacent within a row: copy each row's slice at once.
  const size_t first_head = static_cast<size_t>(task.kv_head) * group * uhd;
  for (int j = task.row_begin; j < task.row_end; ++j) {
    std::memcpy(sc.q.data() + static_cast<size_t>(j - task.row_begin) * group * uhd,
                step.q + static_cast<size_t>(j) * q_dim + first_head, head_bytes * group);
  }
  GatherHeads(kv, step.layer, KvKind::kKey, task.kv_head, 1, first, n_ctx, sc.k.data());
  GatherHeads(kv, step.layer, KvKind::kValue, task.kv_head, 1, first, n_ctx, sc.v.data());

  // S[m, n_cols] = scale * Q[m, hd] · K[n_cols, hd]^T
  const float scale = c.AttentionScale();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n_cols, hd, scale, sc.q.data(), hd,
              sc.k.data(), hd, 0.0f, sc.s.data(), n_cols);
  for (int i = 0; i < m; ++i) {
    const int pos = rows[task.row_begin + i / group].pos;
    const int lo = c.FirstVisiblePosition(pos) - first;  // row's columns: [lo, hi)
    const int hi = pos + 1 - first;
    float* s_row = sc.s.data() + static_cast<size_t>(i) * un_ctx;
    kernels_->softmax(s_row + lo, hi - lo);
    std::fill(s_row, s_row + lo, 0.0f);           // before the window (local attention)
    std::fill(s_row + hi, s_row + n_cols, 0.0f);  // after the row (causal mask)
  }
  // O[m, hd] = P[m, n_cols] · V[n_cols, hd]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, n_cols, 1.0f, sc.s.data(), n_cols,
              sc.v.data(), hd, 0.0f, sc.o.data(), hd);
  for (int j = task.row_begin; j < task.row_end; ++j) {
    std::memcpy(step.att_out + static_cast<size_t>(j) * q_dim + first_head,
                sc.o.data() + static_cast<size_t>(j - task.row_begin) * group * uhd,
                head_bytes * group);
  }
}

}  // namespace kvserve::backends::cpu_blas
