// KernelSet::matmul_q4_0_panels, matmul_q8_0_panels, matmul_q4_k_panels and
// matmul_q6_k_panels: quantized weights in the 16-row panel layouts (model/panels.h)
// against Q8Block (q4_0, q8_0) or Q8KBlock (q4_K, q6_K) activation rows, in 512-bit
// vectors with vpdpbusd. Not a normal header: simd_avx512_vnni.cc includes it inside its
// anonymous namespace, with KVSERVE_SIMD_TARGET defined.
//
// Why: in the panel layouts one 64-byte line holds 4 columns of all 16 rows of a panel, so
// one vpdpbusd multiplies it (q4_0: after a mask or a shift of the nibbles; q8_0: after
// flipping the sign bit, w + 128) by one activation word broadcast to every lane, and the
// 16 lanes of the accumulator are the 16 rows: no per-step decode of the weights into a
// scratch panel, no horizontal sums, and per 32 columns one f16 scale vector converted
// for all activation rows. A tile of P panels x M activation rows keeps its float
// accumulators in registers over the whole row; per (panel, row, block) of q4_0 it spends 8
// vpdpbusd and 3 float instructions (the row-major tiles of simd_quant_tiles_inl.h: 4
// and 3, besides decoding).
//
// Exactness: the integer block sums are exact (q4_0 and q8_0: |sum| <= 32 * 255 * 127 +
// 128 * 32 * 127; the k-quants below); the scales (f16 d_w times f32 d_x) and the final sums round
// as in the other kernels, in another order.

// The 16 rows of a panel in one 512-bit accumulator (the tile driver's lane traits,
// simd_quant_panel_driver_inl.h).
struct Zmm16Lanes {
  using Acc = __m512;
  // Activation rows per pass: 8 float accumulators and 8 integer chains (the tile 2 x 8
  // spilled and ran at two thirds of the rate; 6 rows per pass were slower).
  static constexpr int kMaxRows = 8;
  // Panels per tile for m activation rows (formats with kMultiPanel).
  static constexpr int Panels(int m) { return m <= 2 ? 4 : m <= 4 ? 2 : 1; }
  KVSERVE_SIMD_TARGET static Acc Zero() { return _mm512_setzero_ps(); }
  KVSERVE_SIMD_TARGET static void Store(float* y, Acc a) { _mm512_storeu_ps(y, a); }
};

// Broadcast of 4-byte word k of `p` (activation codes or bsums).
KVSERVE_SIMD_TARGET inline __m512i WordAt(const void* p, int k) {
  int32_t word;
  std::memcpy(&word, static_cast<const uint8_t*>(p) + 4 * k, 4);
  return _mm512_set1_epi32(word);
}

// The formats. Each provides
//   kElems, kBlockBytes              elements per row and bytes of one panel block
//   kPrefetchBlocks                  panel blocks ahead that a panel stream prefetches:
//                                    1-7 KiB (q4_0 1.1, q8_0 2.2, q4_K 4.5, q6_K 6.6).
//                                    Farther ran batch 1 slower (prefetches of lines
//                                    not yet needed compete with the ones in use), and
//                                    none at all slower still; 16 rows did not care
//                                    (bench/kernels_bench.cc BM_QuantLayout, 1 row)
//   kPrefetchBlocksL2                the same for one activation row where the driver
//                                    prefetches into L2 (Batch1PrefetchIntoL2); 0: the
//                                    block about to be read, all its lines at once
//   kMultiPanel                      whether few activation rows take several panels per
//                                    tile (QuantPanelRows)
//   template <int M> static void Accumulate(pb, x, ldxq, b, acc):
//       acc[m] += the 16 rows of panel block pb . block b of activation row m, m < M
//       (Q8Block rows for the 32-element formats, Q8KBlock rows for the k-quants)
//   the lane traits of Zmm16Lanes (the accumulator type, rows per pass, panels per tile)
//
// q4_0 and q8_0 (Block32 below): the block's unsigned codes minus the offset (element =
// d * (code - offset)), its 8 vpdpbusd operands, operand k (columns 4k .. 4k + 3 of the
// block, all 16 rows) handed to fn(k, operand) by ForOperands.
struct Q4_0Codes {
  static constexpr int64_t kBlockBytes = model::kQ4_0PanelBlockBytes;
  static constexpr int32_t kOffset = 8;
  template <typename Fn>
  KVSERVE_SIMD_TARGET static void ForOperands(const uint8_t* pb, const Fn& fn) {
    const __m512i low4 = _mm512_set1_epi8(15);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512i packed = _mm512_loadu_si512(pb + 32 + 64 * j);
      fn(j, _mm512_and_si512(packed, low4));                            // columns 4j ..
      fn(4 + j, _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4));  // 16 + 4j ..
    }
  }
};

struct Q8_0Codes {
  static constexpr int64_t kBlockBytes = model::kQ8_0PanelBlockBytes;
  static constexpr int32_t kOffset = 128;
  template <typename Fn>
  KVSERVE_SIMD_TARGET static void ForOperands(const uint8_t* pb, const Fn& fn) {
    const __m512i sign = _mm512_set1_epi8(-128);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) fn(j, _mm512_xor_si512(_mm512_loadu_si512(pb + 32 + 64 * j), sign));
  }
};

// One f16 scale per row and 32 columns: per (panel, row, block) 8 vpdpbusd and 3 float
// instructions.
template <typename C>
struct Block32 : Zmm16Lanes {
  static constexpr int64_t kElems = 32;
  static constexpr int64_t kBlockBytes = C::kBlockBytes;
  static constexpr int64_t kPrefetchBlocks = 4;
  static constexpr int64_t kPrefetchBlocksL2 = kPrefetchBlocks;
  static constexpr bool kMultiPanel = true;
  template <int M>
  KVSERVE_SIMD_TARGET static void Accumulate(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                             int64_t b, __m512* acc) {
    // The integer chains start at -offset sum(x). (Read from a per-call table of
    // -offset sum instead, the q4_0 tile ran 3-5 % slower at 16 rows.)
    __m512i sum[M];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      sum[m] = _mm512_set1_epi32(-C::kOffset * XAt<Q8Block>(x, ldxq, m, b).sum);
    }
    C::ForOperands(pb, [&](int k, __m512i w) KVSERVE_SIMD_TARGET {
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        sum[m] = _mm512_dpbusd_epi32(sum[m], w, WordAt(XAt<Q8Block>(x, ldxq, m, b).q, k));
      }
    });
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb)));
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(XAt<Q8Block>(x, ldxq, m, b).d));
      acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[m]), d, acc[m]);
    }
  }
};

using Q4_0Panel = Block32<Q4_0Codes>;
using Q8_0Panel = Block32<Q8_0Codes>;

// The k-quants: per 256 columns, integer chains per sub-block (q4_K: 32 columns, q6_K:
// 16) multiplied by the rows' integer sub-block scales (vpmulld) into one integer sum per
// (row, activation row), then one float scale. Per (panel, row, block of 256): 64
// vpdpbusd, 8 (q4_K) or 16 (q6_K) vpmulld and as many adds, 8 vpdpwssd for the
// offsets, about 6 float instructions; per panel block, for all rows, the scales'
// unpacking and (q6_K) about 3 instructions per code vector to join its low 4 and high
// 2 bits. The loops are unrolled whole (with the loop over the sub-blocks kept, the tile
// spilled less but ran slower: the loop's bookkeeping and the lost scheduling freedom
// cost more than the spills; bench/kernels_bench.cc BM_QuantLayout).
//
// Exactness: q4_K |sum| <= 8 * 63 * 32 * 15 * 127, mins 8 * 63 * 2 * 2032; q6_K
// 16 * 128 * 16 * 63 * 127 + 32 * 16 * 128 * 2032: all in int32.

// What the two k-quant formats share.
struct KQuantPanel : Zmm16Lanes {
  static constexpr int64_t kElems = 256;
  // Prefetched into L2 at batch 1 (Intel) 0 blocks ahead: every line of the block about to
  // be read (2.3 KiB q4_K, 3.4 KiB q6_K) is requested before its first load, so the
  // block's misses overlap; the hardware prefetchers run ahead of the stream. On an Intel
  // Xeon with 480 MiB L3, tl1b Q4_K_M decoded about 9 % faster with 1 block than with 2
  // (the L1 distance; 3 about 2 %), and 2-8 % faster again with 0; with no prefetch at all
  // 5-10 % slower than 1 at avx512bf16 (docs/performance.md, "AVX-512: Intel Xeon,
  // Granite Rapids class").
  static constexpr int64_t kPrefetchBlocksL2 = 0;
  // One panel per tile: with 4 the unrolled body of 4 panels spilled, and batch 1 ran
  // slower than on row-major weights; with 1 it is faster than row-major in
  // BM_QuantLayout and on par or better for a whole model.
  static constexpr bool kMultiPanel = false;

  // sum[m] += chain[m] * sc (the rows' integer scales of one sub-block), m < M.
  template <int M>
  KVSERVE_SIMD_TARGET static void AddChains(const __m512i* chain, __m512i sc, __m512i* sum) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      sum[m] = InOrder(_mm512_add_epi32(sum[m], _mm512_mullo_epi32(chain[m], sc)));
    }
  }

  // acc[m] += float(sum[m]) * scale * d of activation row m's block b, m < M.
  template <int M>
  KVSERVE_SIMD_TARGET static void AddScaled(const __m512i* sum, __m512 scale, const uint8_t* x,
                                            int64_t ldxq, int64_t b, __m512* acc) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 dx = _mm512_set1_ps(XAt<Q8KBlock>(x, ldxq, m, b).d);
      acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[m]), _mm512_mul_ps(scale, dx), acc[m]);
    }
  }
};

// q4_K: element = d * sc * code - dmin * m per sub-block of 32 (codes 0..15).
struct Q4_KPanel : KQuantPanel {
  static constexpr int64_t kBlockBytes = model::kQ4_KPanelBlockBytes;
  static constexpr int64_t kPrefetchBlocks = 2;
  template <int M>
  KVSERVE_SIMD_TARGET static void Accumulate(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                             int64_t b, __m512* acc) {
    const __m512i head = _mm512_loadu_si512(pb);  // line 0: (d, dmin) of each row
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
    const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16)));
    const __m512i sc_lo = _mm512_loadu_si512(pb + 64);  // scales 0-3 (+ high bits of 4-7)
    const __m512i m_lo = _mm512_loadu_si512(pb + 128);  // mins 0-3 (+ high bits of 4-7)
    const __m512i both = _mm512_loadu_si512(pb + 192);  // low 4 bits of 4-7
    const __m512i six = _mm512_set1_epi32(63);
    const __m512i four = _mm512_set1_epi32(15);
    const __m512i high2 = _mm512_set1_epi32(0x30);
    // Sub-block s's 6-bit scale (min) per row, as ggml's get_scale_min_k4.
    auto six_bit = [&](__m512i lo, int nibble, int s) KVSERVE_SIMD_TARGET {
      if (s < 4) return _mm512_and_si512(_mm512_srli_epi32(lo, 8 * s), six);
      const int t = s - 4;
      return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(both, 8 * t + nibble), four),
                             _mm512_and_si512(_mm512_srli_epi32(lo, 8 * t + 2), high2));
    };
    // dmin * sum_s m_s * (bsums[2s] + bsums[2s + 1]): vpdpwssd of (m_s, m_s) with the
    // bsums word s.
    __m512i sum[M];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) sum[m] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m512i mins = six_bit(m_lo, 4, s);
      const __m512i pair = _mm512_or_si512(mins, _mm512_slli_epi32(mins, 16));
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        sum[m] = _mm512_dpwssd_epi32(sum[m], pair, WordAt(XAt<Q8KBlock>(x, ldxq, m, b).bsums, s));
      }
    }
    AddScaled<M>(sum, _mm512_sub_ps(_mm512_setzero_ps(), dmin), x, ldxq, b, acc);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) sum[m] = _mm512_setzero_si512();
    // d * sum_s sc_s * sum_j code_j x_j.
    const __m512i low4 = _mm512_set1_epi8(15);
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const uint8_t* lines = pb + 64 * (4 + 8 * (s / 2));
      __m512i chain[M];
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) chain[m] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m512i packed = _mm512_loadu_si512(lines + 64 * k);
        const __m512i w =
            _mm512_and_si512(s % 2 == 0 ? packed : _mm512_srli_epi16(packed, 4), low4);
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          chain[m] =
              _mm512_dpbusd_epi32(chain[m], w, WordAt(XAt<Q8KBlock>(x, ldxq, m, b).q, 8 * s + k));
        }
      }
      AddChains<M>(chain, six_bit(sc_lo, 0, s), sum);
    }
    AddScaled<M>(sum, d, x, ldxq, b, acc);
  }
};

// q6_K: element = d * sc * (code - 32) per group of 16 (codes 0..63, int8 scales).
// kUnpacked: the block as simd_quant_panels_avx2_inl.h's Q6_KPanelYmm unpacks it (its
// comment; the parts: Q6_KPanelParts); MatMulQuantPanelsUnpacked writes it with UnpackBlock once
// per slab for many activation rows. The same codes and products in the same order: bit for bit the
// packed kernel's results.
template <bool kUnpacked = false>
struct Q6_KPanel : KQuantPanel, Q6_KPanelParts {
  using Unpacked = Q6_KPanel<true>;
  static constexpr int64_t kBlockBytes =
      kUnpacked ? kUnpackedQ6_KBlockBytes : model::kQ6_KPanelBlockBytes;
  static constexpr int64_t kPrefetchBlocks = 2;
  // Activation rows from which MatMulQuantPanelsUnpacked unpacks: more than 8 passes.
  // kernels_bench at avx512vnni on Zen 5 (2026-12-07), unpacked against packed, 4
  // alternated rounds, medians: 512 rows 740 / 621 GFLOP/s (1.19x), 128 rows 1.11x, 64
  // rows 1.01x, 32 rows 0.89x (these kernels unpack in 3-4 operations per line against
  // 8 vpdpbusd, where the 256-bit ones against 3 rows spend about a third on it).
  static constexpr int kUnpackMinRows = 8 * kMaxRows + 1;
  // Code line c (columns 4c .. 4c + 3 = 128h + 32k + 4w .., h = c / 32, k = c % 32 / 8,
  // w = c % 8): low 4 bits in ql line 16h + 8 (k % 2) + w (high nibbles for k >= 2), high 2
  // bits in qh line 32 + 8h + w (bits 2k, 2k + 1).
  KVSERVE_SIMD_TARGET static __m512i Codes(const uint8_t* pb, int c) {
    if constexpr (kUnpacked) return _mm512_loadu_si512(pb + kHeaderBytes + 64 * c);
    const int h = c / 32, k = c % 32 / 8, w = c % 8;
    const __m512i ql = _mm512_loadu_si512(pb + kHeaderBytes + 64 * (16 * h + 8 * (k % 2) + w));
    const __m512i qh = _mm512_loadu_si512(pb + kHeaderBytes + 64 * (32 + 8 * h + w));
    const __m512i lo = k < 2 ? ql : _mm512_srli_epi16(ql, 4);
    const __m512i hi = k == 0   ? _mm512_slli_epi16(qh, 4)
                       : k == 1 ? _mm512_slli_epi16(qh, 2)
                       : k == 2 ? qh
                                : _mm512_srli_epi16(qh, 2);
    // (lo & 15) | (hi & 0x30)
    return _mm512_ternarylogic_epi32(lo, _mm512_set1_epi8(15),
                                     _mm512_and_si512(hi, _mm512_set1_epi8(0x30)), 0xEA);
  }
  // Writes the unpacked block of packed block pb to out (kUnpackedQ6_KBlockBytes).
  KVSERVE_SIMD_TARGET static void UnpackBlock(const uint8_t* pb, uint8_t* out) {
    std::memcpy(out, pb, kHeaderBytes);
#pragma GCC unroll 8
    for (int c = 0; c < 64; ++c) _mm512_storeu_si512(out + kHeaderBytes + 64 * c, Codes(pb, c));
    std::memcpy(out + kHeaderBytes + kUnpackedCodeBytes, pb + kHeaderBytes + kPackedCodeBytes,
                kTrailerBytes);
  }
  template <int M>
  KVSERVE_SIMD_TARGET static void Accumulate(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                             int64_t b, __m512* acc) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb)));
    // Scale line t (0-3).
    auto scale_line = [&](int t) KVSERVE_SIMD_TARGET {
      return _mm512_loadu_si512(pb + kBlockBytes - kTrailerBytes + 64 * t);
    };
    // -32 * sum_g sc_g * bsums[g]: scale line t sign-extended in int16 halves pairs groups
    // (4t, 4t + 1) and (4t + 2, 4t + 3) (panels.h), as bsums words 2t and 2t + 1 do.
    __m512i sum[M];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) sum[m] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m512i scales = scale_line(t);
      const __m512i first = _mm512_srai_epi16(_mm512_slli_epi16(scales, 8), 8);
      const __m512i second = _mm512_srai_epi16(scales, 8);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const int16_t* bsums = XAt<Q8KBlock>(x, ldxq, m, b).bsums;
        sum[m] = _mm512_dpwssd_epi32(sum[m], first, WordAt(bsums, 2 * t));
        sum[m] = _mm512_dpwssd_epi32(sum[m], second, WordAt(bsums, 2 * t + 1));
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      sum[m] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum[m], 5));
    }
    // + sum_g sc_g * sum_j code_j x_j. Columns 128h + 32k + 4w .. + 3 (h < 2, k < 4,
    // w < 8): code line 32h + 8k + w (Codes); group 8h + 2k + w / 4.
#pragma GCC unroll 8
    for (int hk = 0; hk < 8; ++hk) {
      const int h = hk / 4;
      const int k = hk % 4;
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        __m512i chain[M];
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) chain[m] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int w = 4 * half; w < 4 * half + 4; ++w) {
          const __m512i code = Codes(pb, 32 * h + 8 * k + w);
#pragma GCC unroll 8
          for (int m = 0; m < M; ++m) {
            chain[m] = _mm512_dpbusd_epi32(
                chain[m], code, WordAt(XAt<Q8KBlock>(x, ldxq, m, b).q, 32 * h + 8 * k + w));
          }
        }
        // Group g = 4t + u sits in byte {0, 2, 1, 3}[u] of scale line t.
        const int g = 8 * h + 2 * k + half;
        const int byte = (g % 4 == 1) ? 2 : (g % 4 == 2) ? 1 : g % 4;
        const __m512i sc =
            _mm512_srai_epi32(_mm512_slli_epi32(scale_line(g / 4), 24 - 8 * byte), 24);
        AddChains<M>(chain, sc, sum);
      }
    }
    AddScaled<M>(sum, d, x, ldxq, b, acc);
  }
};

#include "backends/cpu_blas/simd_quant_panel_driver_inl.h"  // NOLINT(build/include)

// The panel kernels, added to a KernelSet of the VNNI level or above.
inline KernelSet WithQuantPanelKernels(KernelSet k) {
  k.matmul_q4_0_panels = &MatMulQuantPanels<Q4_0Panel>;
  k.matmul_q8_0_panels = &MatMulQuantPanels<Q8_0Panel>;
  k.matmul_q4_k_panels = &MatMulQuantPanels<Q4_KPanel>;
  k.matmul_q6_k_panels = &MatMulQuantPanels<Q6_KPanel<>>;
  k.matmul_q6_k_panels_unpacked = &MatMulQuantPanelsUnpacked<Q6_KPanel<>>;
  return k;
}
