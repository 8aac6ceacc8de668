// The loop structure of the vectorised kernels, shared by every instruction-set level.
// Not a normal header: simd_avx2.cc and simd_avx512.cc each include it inside their own
// anonymous namespace, after defining
//   KVSERVE_SIMD_TARGET  the function attribute of their level, e.g.
//                        __attribute__((target("avx2,fma,f16c")))
//   struct V             the float vector of their level:
//       using Reg;                       the register type (__m256, __m512)
//       static constexpr int kLanes;     floats per register
//       static constexpr int kBlockRows; weight rows per batched block, 2 or 4 (registers)
//       Reg Zero(); Reg Broadcast(float); Reg Load(const float*); void Store(float*, Reg);
//       Reg Fma(Reg a, Reg b, Reg c) (a * b + c); float HSum(Reg);
//       __m128 HSum4(Reg, Reg, Reg, Reg) (four sums at once); void Store4(float*, __m128);
//       void Pin(Reg&)                   keeps a value in a register (see Block)
//       Reg Add, Sub, Mul, Div, Min, Max (Reg a, Reg b): lane by lane; Min and Max return
//                                        b when either lane is NaN (as minps / maxps do)
//       Reg Round(Reg)                   to the nearest integer (ties to even)
//       Reg Pow2(Reg n)                  2^n for integer-valued n in [-126, 127]
//       Reg ZeroBelow(Reg v, Reg x, Reg lo)  0 where x < lo, else v (NaN x keeps v)
//       float HMax(Reg)                  the largest lane (no NaN lanes)
//       void StoreCodes(int8_t* q, Reg v)    q[l] = int8(v[l]), v integer-valued in +-127
//   struct F32W, F16W, BF16W   weight element types: using T; Reg Load(const T*) converts
//                              kLanes consecutive elements exactly; float One(T).
// so each level compiles the same, tested logic with its own intrinsics; only the traits
// differ. (A level this machine lacks still runs this logic through the levels it has.)
//
// The contracts of the functions defined here are those of KernelSet (simd_kernels.h).

// How a Block finishes its outputs.
enum class Out { kStore, kAdd };

// What a Block prefetches while it reads its R weight rows (a hint never faults, so
// addresses past the end of the matrix are harmless).
//   kContiguous: the R rows are contiguous (ldw == len) and so are the blocks after them,
//     as in batch-1 decode, which streams each weight once from memory: prefetch the block
//     two blocks ahead at the same pace (one prefetch per 64-byte line). The hardware
//     prefetcher alone does not run far enough ahead for one core to reach the memory
//     bandwidth this stream could take (docs/performance.md, "Batch 1: memory bandwidth").
//   kRows: R strided rows given by the caller (`rows_ahead`: the address of the first of
//     them at this block's first column, row stride ldw), one prefetch per row and 64
//     bytes of columns, for a block that is one column chunk of strided rows.
//   kNone: the rows are already in cache.
enum class Prefetch { kNone, kContiguous, kRows };

// Columns per chunk of a Block's sums: each output is the sum, chunk after chunk in
// order, of one chain of multiply-adds per chunk reduced horizontally (HSum4's tree),
// whatever R, N and the caller's blocking. The batched path (Blocked) works on chunks of
// this size to keep a group's activations in L1; every other path sums the same way, so
// an output row does not depend on how many activation rows share the product (batch
// invariance, GemmOptions::batch_invariant).
constexpr int64_t kChunkCols = 512;

// y[i * ldy + r] (= or +=) W[r, 0:len] · x[i, 0:len] for r in [0, R), i in [0, N): R weight
// rows (row stride ldw) against N activation rows, R * N accumulators in registers, summed
// by chunks of kChunkCols columns as kChunkCols says.
// rows_ahead: see Prefetch::kRows (an integer: the address may lie past the weights).
template <typename W, int R, int N, Prefetch kPrefetch, Out kOut>
KVSERVE_SIMD_TARGET inline void Block(const typename W::T* w, int64_t ldw, int64_t len,
                                      const float* x, int64_t ldx, float* y, int64_t ldy,
                                      uintptr_t rows_ahead = 0) {
  using T = typename W::T;
  constexpr int kLanes = V::kLanes;
  static_assert(kChunkCols % kLanes == 0);
  // (Integer arithmetic: the address may lie past the end of the weights.)
  const uintptr_t ahead =
      kPrefetch == Prefetch::kRows
          ? rows_ahead
          : reinterpret_cast<uintptr_t>(w) + static_cast<uintptr_t>(2 * R * ldw) * sizeof(T);
  constexpr int kStepBytes = kLanes * R * static_cast<int>(sizeof(T));
  constexpr int kSums = R * N;
  float total[kSums] = {};  // total[i * R + r]: the sums of the chunks so far
  for (int64_t c0 = 0; c0 < len; c0 += kChunkCols) {
    const int64_t c_end = std::min(len, c0 + kChunkCols);
    typename V::Reg acc[R][N];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) acc[r][i] = V::Zero();
    }
    int64_t c = c0;
    for (; c + kLanes <= c_end; c += kLanes) {
      if constexpr (kPrefetch == Prefetch::kContiguous) {
#pragma GCC unroll 8
        for (int b = 0; b < kStepBytes; b += 64) {
          __builtin_prefetch(
              reinterpret_cast<const char*>(ahead + static_cast<uintptr_t>(c * R) * sizeof(T) + b));
        }
      } else if constexpr (kPrefetch == Prefetch::kRows) {
        if ((c * static_cast<int64_t>(sizeof(T))) % 64 == 0) {
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            __builtin_prefetch(reinterpret_cast<const char*>(
                ahead + static_cast<uintptr_t>(r * ldw + c) * sizeof(T)));
          }
        }
      }
      typename V::Reg wv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) wv[r] = W::Load(w + r * ldw + c);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) {
        typename V::Reg xv = V::Load(x + i * ldx + c);
        // Keep xv in a register for its R FMAs: left alone, GCC folds the load into each
        // FMA, and R * N loads per step instead of N make the loop load-bound, not
        // FMA-bound (a block in L2 runs measurably slower without the pin).
        if constexpr (R > 1) V::Pin(xv);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][i] = V::Fma(wv[r], xv, acc[r][i]);
      }
    }
    // The R * N horizontal sums, activation row by activation row (sums[i * R + r]), four
    // at a time (V::HSum4; a short last group padded with zero vectors, so that every
    // accumulator is reduced by the same tree).
    float sums[kSums + 3];
    const typename V::Reg zero = V::Zero();
#pragma GCC unroll 8
    for (int f = 0; f < kSums; f += 4) {
      V::Store4(sums + f,
                V::HSum4(acc[f % R][f / R], f + 1 < kSums ? acc[(f + 1) % R][(f + 1) / R] : zero,
                         f + 2 < kSums ? acc[(f + 2) % R][(f + 2) / R] : zero,
                         f + 3 < kSums ? acc[(f + 3) % R][(f + 3) / R] : zero));
    }
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < N; ++i) {
        float s = sums[i * R + r];
        for (int64_t t = c; t < c_end; ++t) s += W::One(w[r * ldw + t]) * x[i * ldx + t];
        total[i * R + r] = c0 == 0 ? s : total[i * R + r] + s;
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < N; ++i) {
      const float s = len > 0 ? total[i * R + r] : 0.0f;
      if constexpr (kOut == Out::kAdd) {
        y[i * ldy + r] += s;
      } else {
        y[i * ldy + r] = s;
      }
    }
  }
}

// The batched path's blocking (see MatMul). A group of activation rows is at most
// kMaxGroup rows against V::kBlockRows weight rows (AVX2: 2 x 6 accumulators, 12 of its 16
// registers; AVX-512: 4 x 6, 24 of its 32); the columns are taken
// kChunkCols at a time so a group's slice of x (6 x 512 floats, 12 KiB) stays in L1; the
// rows kTileRows at a time so a tile's slice of W (32 x 512 x 4 B = 64 KiB at most) stays
// in L2 while every group passes over it.
constexpr int kMaxGroup = 6;
constexpr int64_t kTileRows = 32;
constexpr int64_t kPackedStride = kChunkCols + 16;
// Activation rows packed at once (32 x 528 floats: 66 KiB of stack). More rows run as
// several passes over the weights; cpu_blas hands 32 rows or more to sgemm anyway.
constexpr int kMaxPackedRows = 32;
// Up to this many activation rows MatMul streams whole rows instead (bench/kernels_bench.cc
// BM_Gemm, AVX2, one thread: at 4 and 8 rows the row-after-row order is as fast or up to
// 40 % faster on 16-bit weights, from 16 rows the blocked order is).
constexpr int kStreamMaxRows = 8;

// Block over R rows and any 1 <= nn <= kMaxGroup activation rows.
template <typename W, int R, Prefetch kPrefetch, Out kOut>
KVSERVE_SIMD_TARGET inline void BlockN(int nn, const typename W::T* w, int64_t ldw, int64_t len,
                                       const float* x, int64_t ldx, float* y, int64_t ldy,
                                       uintptr_t rows_ahead = 0) {
  switch (nn) {
    case 1:
      Block<W, R, 1, kPrefetch, kOut>(w, ldw, len, x, ldx, y, ldy, rows_ahead);
      break;
    case 2:
      Block<W, R, 2, kPrefetch, kOut>(w, ldw, len, x, ldx, y, ldy, rows_ahead);
      break;
    case 3:
      Block<W, R, 3, kPrefetch, kOut>(w, ldw, len, x, ldx, y, ldy, rows_ahead);
      break;
    case 4:
      Block<W, R, 4, kPrefetch, kOut>(w, ldw, len, x, ldx, y, ldy, rows_ahead);
      break;
    case 5:
      Block<W, R, 5, kPrefetch, kOut>(w, ldw, len, x, ldx, y, ldy, rows_ahead);
      break;
    default:
      Block<W, R, 6, kPrefetch, kOut>(w, ldw, len, x, ldx, y, ldy, rows_ahead);
      break;
  }
}

// What one group's pass over a tile prefetches (see Tile).
struct TilePrefetch {
  bool within = false;  // this tile's rows, 2R rows ahead of each block (kRows)
  uintptr_t next = 0;   // the next tile's first row at its first column (0: none)
  int part = 0;         // of the next tile, the blocks b with b % parts == part
  int parts = 1;
};

// One block of R rows at r (of the tile starting at r0; block index b) with the prefetch
// `pf` asks of it.
template <typename W, int R, Out kOut>
KVSERVE_SIMD_TARGET inline void TileBlock(const TilePrefetch& pf, int64_t b, int nn,
                                          const typename W::T* w, int64_t cols, int64_t r0,
                                          int64_t r, int64_t c0, int64_t len, const float* x,
                                          int64_t ldx, float* y, int64_t ldy) {
  using T = typename W::T;
  const T* wb = w + r * cols + c0;
  if (pf.within) {
    const uintptr_t ahead =
        reinterpret_cast<uintptr_t>(wb) + static_cast<uintptr_t>(2 * R * cols) * sizeof(T);
    BlockN<W, R, Prefetch::kRows, kOut>(nn, wb, cols, len, x, ldx, y + r, ldy, ahead);
  } else if (pf.next != 0 && b % pf.parts == pf.part) {
    const uintptr_t ahead = pf.next + static_cast<uintptr_t>((r - r0) * cols) * sizeof(T);
    BlockN<W, R, Prefetch::kRows, kOut>(nn, wb, cols, len, x, ldx, y + r, ldy, ahead);
  } else {
    BlockN<W, R, Prefetch::kNone, kOut>(nn, wb, cols, len, x, ldx, y + r, ldy);
  }
}

// Rows [r0, r1) of the column chunk [c0, c0 + len) against the activation rows of one
// group (x: the group's slice of that chunk, from its column c0).
template <typename W, Out kOut>
KVSERVE_SIMD_TARGET void Group(const TilePrefetch& pf, int nn, const typename W::T* w, int64_t cols,
                               int64_t r0, int64_t r1, int64_t c0, int64_t len, const float* x,
                               int64_t ldx, float* y, int64_t ldy) {
  int64_t r = r0;
  int64_t b = 0;
  if constexpr (V::kBlockRows == 4) {
    for (; r + 4 <= r1; r += 4, ++b) {
      TileBlock<W, 4, kOut>(pf, b, nn, w, cols, r0, r, c0, len, x, ldx, y, ldy);
    }
  }
  for (; r + 2 <= r1; r += 2, ++b) {
    TileBlock<W, 2, kOut>(pf, b, nn, w, cols, r0, r, c0, len, x, ldx, y, ldy);
  }
  if (r < r1) TileBlock<W, 1, kOut>(pf, b, nn, w, cols, r0, r, c0, len, x, ldx, y, ldy);
}

// n >= 1 activation rows split into groups of at most kMaxGroup whose sizes differ by at
// most one (16 rows: 6 + 5 + 5; 8 rows: 4 + 4), so no group is left short of FMA chains.
struct Groups {
  explicit Groups(int n)
      : count((n + kMaxGroup - 1) / kMaxGroup), base(n / count), extra(n % count) {}
  int Begin(int g) const { return g * base + std::min(g, extra); }
  int Size(int g) const { return base + (g < extra ? 1 : 0); }
  int count;
  int base;
  int extra;
};

// One tile of rows [r0, r1) in one column chunk against n packed activation rows (xs:
// their slice of the chunk, row stride kPackedStride). Memory and arithmetic overlap: the
// first group reads the tile with a short lookahead (kRows, 2R rows), which finds the
// lines already there unless this is the first tile; the other groups, which find the
// tile in L1/L2, share out the prefetch of the next tile (`next`, as TilePrefetch), so
// its weights arrive while they compute instead of while the first group waits for them
// (f32 2048 x 768, 16 rows, 2 threads: measured in docs/performance.md).
template <typename W, Out kOut>
KVSERVE_SIMD_TARGET void Tile(const typename W::T* w, int64_t cols, int64_t r0, int64_t r1,
                              int64_t c0, int64_t len, const float* xs, int n, float* y,
                              int64_t ldy, uintptr_t next) {
  const Groups groups(n);
  for (int g = 0; g < groups.count; ++g) {
    const int i = groups.Begin(g);
    TilePrefetch pf;
    if (g == 0) {
      pf.within = true;
    } else {
      pf.next = next;
      pf.part = g - 1;
      pf.parts = groups.count - 1;
    }
    Group<W, kOut>(pf, groups.Size(g), w, cols, r0, r1, c0, len, xs + i * kPackedStride,
                   kPackedStride, y + i * ldy, ldy);
  }
}

// Rows [row_begin, row_end) against n <= kMaxPackedRows activation rows, blocked for the
// caches (see kChunkCols and kTileRows); each weight is still read from memory once.
template <typename W>
KVSERVE_SIMD_TARGET void Blocked(const typename W::T* w, int64_t cols, int64_t row_begin,
                                 int64_t row_end, const float* x, int64_t ldx, int n, float* y,
                                 int64_t ldy) {
  // The chunk's slice of x, copied once per chunk to a padded stride: rows of x whose
  // stride is a multiple of 4 KiB (cols = 2048 floats) map to the same L1 sets and evict
  // one another, so the kernel would wait on L2 for rows it has just read.
  alignas(64) float xs[kMaxPackedRows * kPackedStride];
  for (int64_t c0 = 0; c0 < cols; c0 += kChunkCols) {
    const int64_t len = std::min(kChunkCols, cols - c0);
    for (int i = 0; i < n; ++i) std::copy_n(x + i * ldx + c0, len, xs + i * kPackedStride);
    for (int64_t t0 = row_begin; t0 < row_end; t0 += kTileRows) {
      const int64_t t1 = std::min(row_end, t0 + kTileRows);
      // The tile after this one: the next rows of this chunk, else the first rows of the
      // next chunk.
      uintptr_t next = 0;
      if (t1 < row_end) {
        next = reinterpret_cast<uintptr_t>(w + t1 * cols + c0);
      } else if (c0 + kChunkCols < cols) {
        next = reinterpret_cast<uintptr_t>(w + row_begin * cols + c0 + kChunkCols);
      }
      if (c0 == 0) {
        Tile<W, Out::kStore>(w, cols, t0, t1, c0, len, xs, n, y, ldy, next);
      } else {
        Tile<W, Out::kAdd>(w, cols, t0, t1, c0, len, xs, n, y, ldy, next);
      }
    }
  }
}

template <typename W>
KVSERVE_SIMD_TARGET void MatMul(const typename W::T* w, int64_t cols, int64_t row_begin,
                                int64_t row_end, const float* x, int64_t ldx, int n, float* y,
                                int64_t ldy) {
  if (n == 1) {
    // Decode: four weight rows at a time keep four independent FMA chains in flight; the
    // weights stream from memory once, so the kernel is bound by bandwidth, not FMAs.
    int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) {
      Block<W, 4, 1, Prefetch::kContiguous, Out::kStore>(w + r * cols, cols, cols, x, ldx, y + r,
                                                         ldy);
    }
    for (; r < row_end; ++r) {
      Block<W, 1, 1, Prefetch::kContiguous, Out::kStore>(w + r * cols, cols, cols, x, ldx, y + r,
                                                         ldy);
    }
    return;
  }
  if (n <= kStreamMaxRows) {
    const Groups groups(n);
    // A few rows: still mostly bound by the weight stream, which flows best row after row
    // with the contiguous prefetch. Two weight rows (hot in L1) against each group.
    for (int64_t r = row_begin; r < row_end; r += 2) {
      const bool pair = r + 2 <= row_end;
      for (int g = 0; g < groups.count; ++g) {
        const int i = groups.Begin(g);
        const int nn = groups.Size(g);
        const typename W::T* wr = w + r * cols;
        const float* xi = x + i * ldx;
        float* yi = y + i * ldy + r;
        if (!pair) {
          BlockN<W, 1, Prefetch::kNone, Out::kStore>(nn, wr, cols, cols, xi, ldx, yi, ldy);
        } else if (g == 0) {
          BlockN<W, 2, Prefetch::kContiguous, Out::kStore>(nn, wr, cols, cols, xi, ldx, yi, ldy);
        } else {
          BlockN<W, 2, Prefetch::kNone, Out::kStore>(nn, wr, cols, cols, xi, ldx, yi, ldy);
        }
      }
    }
    return;
  }
  // More rows: bound by FMAs once the weights are in cache, so the loops are blocked for
  // the caches, kMaxPackedRows activation rows at a time.
  for (int i = 0; i < n; i += kMaxPackedRows) {
    Blocked<W>(w, cols, row_begin, row_end, x + i * ldx, ldx, std::min(kMaxPackedRows, n - i),
               y + i * ldy, ldy);
  }
}

// Row t of a KV block (see KernelSet::dot_rows).
template <typename W>
inline const typename W::T* KvRow(const void* rows, size_t stride, int t) {
  return reinterpret_cast<const typename W::T*>(static_cast<const uint8_t*>(rows) +
                                                static_cast<size_t>(t) * stride);
}

// Queries per tile of dot_rows and axpy_rows when several share the rows: each row vector
// is loaded (and widened from f16) once for Q queries. 4 x 4 accumulators and 4 row
// vectors fit the 32 registers of AVX-512 and NEON, 2 x 4 the 16 of AVX2.
constexpr int kQueriesPerTile = V::kLanes == 8 ? 2 : 4;

// out[j][t..t+R) = scale * q[j] · row_t for j < Q: Q x R independent FMA chains, each row
// vector loaded once for the Q queries and each query vector once for the R rows; the
// chains reduced four at a time (V::HSum4, a short group padded with zero vectors), so
// every score takes the same chain and tree whatever Q and R: a score does not depend on
// how many positions or queries share its call (batch invariance), and four sums cost
// about what one did (a prefill chunk's attention makes one per query, position and head).
// Without a scalar tail (hd a multiple of kLanes) the four sums are scaled and stored as
// one vector: the same multiply per score as the scalar path, which stores each score
// through the stack one at a time.
template <typename W, int Q, int R>
KVSERVE_SIMD_TARGET inline void DotRowsTile(const float* const* q, float* const* out,
                                            const void* rows, size_t stride, int t, int hd,
                                            float scale) {
  constexpr int kLanes = V::kLanes;
  const typename W::T* r[R];
  typename V::Reg acc[Q][R];
#pragma GCC unroll 8
  for (int k = 0; k < R; ++k) r[k] = KvRow<W>(rows, stride, t + k);
#pragma GCC unroll 4
  for (int j = 0; j < Q; ++j) {
#pragma GCC unroll 8
    for (int k = 0; k < R; ++k) acc[j][k] = V::Zero();
  }
  int i = 0;
  for (; i + kLanes <= hd; i += kLanes) {
    if constexpr (Q == 1) {
      const typename V::Reg qv = V::Load(q[0] + i);
#pragma GCC unroll 8
      for (int k = 0; k < R; ++k) acc[0][k] = V::Fma(W::Load(r[k] + i), qv, acc[0][k]);
    } else {
      typename V::Reg rv[R];
#pragma GCC unroll 8
      for (int k = 0; k < R; ++k) rv[k] = W::Load(r[k] + i);
#pragma GCC unroll 4
      for (int j = 0; j < Q; ++j) {
        const typename V::Reg qv = V::Load(q[j] + i);
#pragma GCC unroll 8
        for (int k = 0; k < R; ++k) acc[j][k] = V::Fma(rv[k], qv, acc[j][k]);
      }
    }
  }
  const typename V::Reg zero = V::Zero();
  if constexpr (R % 4 == 0) {
    if (i == hd) {  // no scalar tail: four scores scaled and stored at a time
#pragma GCC unroll 4
      for (int j = 0; j < Q; ++j) {
#pragma GCC unroll 8
        for (int k = 0; k < R; k += 4) {
          V::Store4(
              out[j] + t + k,
              V::Scale4(V::HSum4(acc[j][k], acc[j][k + 1], acc[j][k + 2], acc[j][k + 3]), scale));
        }
      }
      return;
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < Q; ++j) {
    float sums[R + 3];
#pragma GCC unroll 8
    for (int k = 0; k < R; k += 4) {
      V::Store4(sums + k,
                V::HSum4(acc[j][k], k + 1 < R ? acc[j][k + 1] : zero,
                         k + 2 < R ? acc[j][k + 2] : zero, k + 3 < R ? acc[j][k + 3] : zero));
    }
    for (int k = 0; k < R; ++k) {
      float s = sums[k];
      for (int e = i; e < hd; ++e) s += q[j][e] * W::One(r[k][e]);
      out[j][t + k] = scale * s;
    }
  }
}

// Rows [0, count) against Q queries: tiles of 8 rows for one query, 4 for several.
template <typename W, int Q>
KVSERVE_SIMD_TARGET void DotRowsOf(const float* const* q, float* const* out, const void* rows,
                                   size_t stride, int count, int hd, float scale) {
  constexpr int R = Q == 1 ? 8 : 4;
  int t = 0;
  for (; t + R <= count; t += R) DotRowsTile<W, Q, R>(q, out, rows, stride, t, hd, scale);
  for (; t < count; ++t) DotRowsTile<W, Q, 1>(q, out, rows, stride, t, hd, scale);
}

template <typename W>
KVSERVE_SIMD_TARGET void DotRows(const float* const* q, float* const* out, int nq, const void* rows,
                                 size_t stride, int count, int hd, float scale) {
  int j = 0;
  for (; j + kQueriesPerTile <= nq; j += kQueriesPerTile) {
    DotRowsOf<W, kQueriesPerTile>(q + j, out + j, rows, stride, count, hd, scale);
  }
  for (; j < nq; ++j) DotRowsOf<W, 1>(q + j, out + j, rows, stride, count, hd, scale);
}

// y[j][i..i + NV * kLanes) += sum_t a[j][t] * row_t[same] for j < Q: Q x NV accumulators
// stay in registers over all rows (one load and store of y per call instead of one per
// row), each row vector loaded once for the Q queries. Every lane is one chain of FMAs
// over t in order, whatever Q and NV.
template <typename W, int Q, int NV>
KVSERVE_SIMD_TARGET inline void AxpyRowsChunk(const float* const* a, float* const* y,
                                              const void* rows, size_t stride, int count, int i) {
  constexpr int kLanes = V::kLanes;
  typename V::Reg acc[Q][NV];
#pragma GCC unroll 4
  for (int j = 0; j < Q; ++j) {
#pragma GCC unroll 8
    for (int k = 0; k < NV; ++k) acc[j][k] = V::Load(y[j] + i + k * kLanes);
  }
  for (int t = 0; t < count; ++t) {
    const typename W::T* r = KvRow<W>(rows, stride, t) + i;
    if constexpr (Q == 1) {
      const typename V::Reg at = V::Broadcast(a[0][t]);
#pragma GCC unroll 8
      for (int k = 0; k < NV; ++k) acc[0][k] = V::Fma(at, W::Load(r + k * kLanes), acc[0][k]);
    } else {
      typename V::Reg rv[NV];
#pragma GCC unroll 8
      for (int k = 0; k < NV; ++k) rv[k] = W::Load(r + k * kLanes);
#pragma GCC unroll 4
      for (int j = 0; j < Q; ++j) {
        const typename V::Reg at = V::Broadcast(a[j][t]);
#pragma GCC unroll 8
        for (int k = 0; k < NV; ++k) acc[j][k] = V::Fma(at, rv[k], acc[j][k]);
      }
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < Q; ++j) {
#pragma GCC unroll 8
    for (int k = 0; k < NV; ++k) V::Store(y[j] + i + k * kLanes, acc[j][k]);
  }
}

// All of [0, hd) for Q queries: passes of kMaxNV vectors (one query: 8, 8 FMA chains cover
// the latency on both pipes; several: 4, what the registers hold beside the row vectors),
// then what is left in passes of 4, 2 and 1 vectors, then the scalar tail.
template <typename W, int Q>
KVSERVE_SIMD_TARGET void AxpyRowsOf(const float* const* a, float* const* y, const void* rows,
                                    size_t stride, int count, int hd) {
  constexpr int kLanes = V::kLanes;
  constexpr int kMaxNV = Q == 1 ? 8 : 4;
  int i = 0;
  for (; i + kMaxNV * kLanes <= hd; i += kMaxNV * kLanes) {
    AxpyRowsChunk<W, Q, kMaxNV>(a, y, rows, stride, count, i);
  }
  if (kMaxNV > 4 && i + 4 * kLanes <= hd) {
    AxpyRowsChunk<W, Q, 4>(a, y, rows, stride, count, i);
    i += 4 * kLanes;
  }
  if (i + 2 * kLanes <= hd) {
    AxpyRowsChunk<W, Q, 2>(a, y, rows, stride, count, i);
    i += 2 * kLanes;
  }
  if (i + kLanes <= hd) {
    AxpyRowsChunk<W, Q, 1>(a, y, rows, stride, count, i);
    i += kLanes;
  }
  for (int j = 0; j < Q; ++j) {
    for (int e = i; e < hd; ++e) {
      float s = y[j][e];
      for (int t = 0; t < count; ++t) s += a[j][t] * W::One(KvRow<W>(rows, stride, t)[e]);
      y[j][e] = s;
    }
  }
}

template <typename W>
KVSERVE_SIMD_TARGET void AxpyRows(const float* const* a, float* const* y, int nq, const void* rows,
                                  size_t stride, int count, int hd) {
  int j = 0;
  for (; j + kQueriesPerTile <= nq; j += kQueriesPerTile) {
    AxpyRowsOf<W, kQueriesPerTile>(a + j, y + j, rows, stride, count, hd);
  }
  for (; j < nq; ++j) AxpyRowsOf<W, 1>(a + j, y + j, rows, stride, count, hd);
}

template <typename W>
KVSERVE_SIMD_TARGET void Convert(const uint16_t* in, float* out, int64_t n) {
  constexpr int kLanes = V::kLanes;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) V::Store(out + i, W::Load(in + i));
  for (; i < n; ++i) out[i] = W::One(in[i]);
}

KVSERVE_SIMD_TARGET void ConvertToF16(const float* in, uint16_t* out, int64_t n) {
  constexpr int kLanes = V::kLanes;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) F16W::Store(out + i, V::Load(in + i));
  for (; i < n; ++i) out[i] = model::FloatToHalf(in[i]);
}

// exp(x) per lane, as Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two
// parts, the first with few bits, so n times it is exact and r keeps its precision),
// exp(r) by a degree-7 polynomial, times 2^n. Within a few float roundings of std::exp
// for x in [-87.33, 88] (2^n stays a normal float); 0 below (where exp underflows to
// denormals), exp(88) above; NaN stays NaN (the clamps keep the second operand, x, when
// it is NaN).
KVSERVE_SIMD_TARGET inline V::Reg ExpApprox(V::Reg x) {
  const V::Reg lo = V::Broadcast(-87.33654f);
  const V::Reg c = V::Min(V::Broadcast(88.0f), V::Max(lo, x));
  const V::Reg n = V::Round(V::Mul(c, V::Broadcast(1.44269504088896341f)));
  V::Reg r = V::Fma(n, V::Broadcast(-0.693359375f), c);
  r = V::Fma(n, V::Broadcast(2.12194440e-4f), r);
  V::Reg p = V::Broadcast(1.9875691500e-4f);
  p = V::Fma(p, r, V::Broadcast(1.3981999507e-3f));
  p = V::Fma(p, r, V::Broadcast(8.3334519073e-3f));
  p = V::Fma(p, r, V::Broadcast(4.1665795894e-2f));
  p = V::Fma(p, r, V::Broadcast(1.6666665459e-1f));
  p = V::Fma(p, r, V::Broadcast(5.0000001201e-1f));
  const V::Reg e = V::Fma(V::Mul(p, r), r, V::Add(r, V::Broadcast(1.0f)));
  return V::ZeroBelow(V::Mul(e, V::Pow2(n)), x, lo);
}

// KernelSet::softmax. The last n % kLanes elements go through a vector padded with -inf
// (whose exp is 0), so every element takes the same path.
KVSERVE_SIMD_TARGET void Softmax(float* x, int64_t n) {
  constexpr int kLanes = V::kLanes;
  if (n <= 0) return;
  const int64_t full = n / kLanes * kLanes;
  float tail[kLanes];
  std::fill(tail, tail + kLanes, -std::numeric_limits<float>::infinity());
  std::copy(x + full, x + n, tail);
  V::Reg m = V::Load(tail);
  for (int64_t i = 0; i < full; i += kLanes) m = V::Max(m, V::Load(x + i));
  float lanes[kLanes];
  V::Store(lanes, m);
  const V::Reg max_value = V::Broadcast(*std::max_element(lanes, lanes + kLanes));
  V::Reg sum = V::Zero();
  for (int64_t i = 0; i < full; i += kLanes) {
    const V::Reg e = ExpApprox(V::Sub(V::Load(x + i), max_value));
    V::Store(x + i, e);
    sum = V::Add(sum, e);
  }
  const V::Reg e_tail = ExpApprox(V::Sub(V::Load(tail), max_value));
  sum = V::Add(sum, e_tail);
  const V::Reg inv_sum = V::Broadcast(1.0f / V::HSum(sum));
  for (int64_t i = 0; i < full; i += kLanes) V::Store(x + i, V::Mul(V::Load(x + i), inv_sum));
  V::Store(tail, V::Mul(e_tail, inv_sum));
  std::copy(tail, tail + (n - full), x + full);
}

// silu(g) * u per lane.
KVSERVE_SIMD_TARGET inline V::Reg SiluTimes(V::Reg g, V::Reg u) {
  const V::Reg one = V::Broadcast(1.0f);
  return V::Mul(V::Div(g, V::Add(one, ExpApprox(V::Sub(V::Zero(), g)))), u);
}

// KernelSet::swiglu; the tail through zero-padded vectors.
KVSERVE_SIMD_TARGET void SwiGlu(float* gate, const float* up, int64_t n) {
  constexpr int kLanes = V::kLanes;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    V::Store(gate + i, SiluTimes(V::Load(gate + i), V::Load(up + i)));
  }
  if (i == n) return;
  float g[kLanes] = {};
  float u[kLanes] = {};
  std::copy(gate + i, gate + n, g);
  std::copy(up + i, up + n, u);
  V::Store(g, SiluTimes(V::Load(g), V::Load(u)));
  std::copy(g, g + (n - i), gate + i);
}

// KernelSet::rms_norm: four chains of vector multiply-adds for the squares; the tail
// through a zero-padded vector.
KVSERVE_SIMD_TARGET void RmsNormV(const float* x, const float* w, int64_t n, float eps,
                                  float* out) {
  constexpr int kLanes = V::kLanes;
  V::Reg s0 = V::Zero(), s1 = V::Zero(), s2 = V::Zero(), s3 = V::Zero();
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const V::Reg a = V::Load(x + i), b = V::Load(x + i + kLanes);
    const V::Reg c = V::Load(x + i + 2 * kLanes), d = V::Load(x + i + 3 * kLanes);
    s0 = V::Fma(a, a, s0);
    s1 = V::Fma(b, b, s1);
    s2 = V::Fma(c, c, s2);
    s3 = V::Fma(d, d, s3);
  }
  for (; i + kLanes <= n; i += kLanes) {
    const V::Reg a = V::Load(x + i);
    s0 = V::Fma(a, a, s0);
  }
  const int64_t full = i;
  float tail[kLanes] = {};
  std::copy(x + full, x + n, tail);
  const V::Reg t = V::Load(tail);
  s1 = V::Fma(t, t, s1);
  const float sum_squares = V::HSum(V::Add(V::Add(s0, s1), V::Add(s2, s3)));
  const float inv_rms = static_cast<float>(
      1.0 / std::sqrt(static_cast<double>(sum_squares) / static_cast<double>(n) + eps));
  const V::Reg inv = V::Broadcast(inv_rms);
  for (i = 0; i < full; i += kLanes) {
    V::Store(out + i, V::Mul(V::Load(w + i), V::Mul(V::Load(x + i), inv)));
  }
  for (; i < n; ++i) out[i] = w[i] * (x[i] * inv_rms);
}

// d and the codes of n floats (a multiple of `group`) as q8_activations.cc's scalar
// QuantizeBlock computes them: d = max|x| / 127, q = clamp(round(x * (1 / d)), +-127),
// ties to even, or round(x / d) where 1 / d overflows; sums[g] = the sum of codes
// [g * group, (g + 1) * group) (exact: integers far below 2^24 in float). |x| is
// max(x, 0 - x), so -0 gives +0 as fabs does (the sign of d stays that of the scalar
// code's); the order of the max does not matter for finite x. Precondition: group a
// multiple of kLanes.
KVSERVE_SIMD_TARGET inline float QuantizeBlockV(const float* x, int n, int group, int8_t* q,
                                                int* sums) {
  constexpr int kLanes = V::kLanes;
  V::Reg amax = V::Zero();
  for (int j = 0; j < n; j += kLanes) {
    const V::Reg v = V::Load(x + j);
    amax = V::Max(amax, V::Max(v, V::Sub(V::Zero(), v)));
  }
  const float d = V::HMax(amax) / 127.0f;
  const float inv = d != 0.0f ? 1.0f / d : 0.0f;
  const bool divide = std::isinf(inv);
  const V::Reg id = V::Broadcast(inv);
  const V::Reg vd = V::Broadcast(d);
  const V::Reg lo = V::Broadcast(-127.0f);
  const V::Reg hi = V::Broadcast(127.0f);
  for (int j = 0; j < n; j += group) {
    V::Reg sum = V::Zero();
    for (int l = j; l < j + group; l += kLanes) {
      const V::Reg v = divide ? V::Div(V::Load(x + l), vd) : V::Mul(V::Load(x + l), id);
      const V::Reg c = V::Min(V::Max(V::Round(v), lo), hi);
      V::StoreCodes(q + l, c);
      sum = V::Add(sum, c);
    }
    sums[j / group] = static_cast<int>(V::HSum(sum));
  }
  return d;
}

// KernelSet::quantize_activations.
KVSERVE_SIMD_TARGET void QuantizeActivationsV(model::DType weights, const float* x, int64_t cols,
                                              void* out) {
  if (UsesQ8Blocks(weights)) {
    auto* blocks = static_cast<Q8Block*>(out);
    for (int64_t b = 0; b < cols / 32; ++b) {
      Q8Block& o = blocks[b];
      o.d = QuantizeBlockV(x + 32 * b, 32, 32, o.q, &o.sum);
    }
    return;
  }
  auto* blocks = static_cast<Q8KBlock*>(out);
  int sums[16];
  for (int64_t b = 0; b < cols / 256; ++b) {
    Q8KBlock& o = blocks[b];
    o.d = QuantizeBlockV(x + 256 * b, 256, 16, o.q, sums);
    for (int g = 0; g < 16; ++g) o.bsums[g] = static_cast<int16_t>(sums[g]);
  }
}

// The float kernel set of the including level (the quantized kernels come from
// simd_quant_inl.h's WithQuantKernels).
constexpr KernelSet MakeKernelSet(Isa isa) {
  return KernelSet{isa,
                   &MatMul<F32W>,
                   &MatMul<F16W>,
                   &MatMul<BF16W>,
                   nullptr,
                   nullptr,
                   nullptr,
                   nullptr,
                   nullptr,
                   nullptr,
                   nullptr,
                   &DotRows<F32W>,
                   &DotRows<F16W>,
                   &AxpyRows<F32W>,
                   &AxpyRows<F16W>,
                   &Convert<F16W>,
                   &Convert<BF16W>,
                   &ConvertToF16,
                   &Softmax,
                   &SwiGlu,
                   &RmsNormV,
                   &QuantizeActivationsV};
}
