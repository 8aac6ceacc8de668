// Batch-1 products of q4_K, q5_K, q6_K, q4_0 and q5_0 weights with one activation row (Q8KBlock,
// Q8Block) in 512-bit vectors, for the AVX-512 VNNI level. Not a normal header:
// simd_avx512_vnni.cc includes it inside its anonymous namespace after simd_quant_inl.h
// (QMatMulT, the batched fallback), with KVSERVE_SIMD_TARGET defined.
//
// Why: the 256-bit batch-1 product (QMatMulT with KFormatDot) spends about 100
// instructions per 256 weights (per 32 codes a zeroed vpdpbusd, a vpmulld by the sub-block
// scale and an add; eight vpermd to spread the scales; spills), so a Q4_K_M model decoded
// well below the bandwidth bound. Here each 64 codes take one vpmaddubsw (u8
// codes x s8 activations into int16 pair sums: at most 2 * 63 * 127, no saturation) and
// one vpdpwssd that multiplies the pair sums by their sub-block's (q4_K) or group's (q6_K)
// scale and adds them into int32 (at most 16 * 63 * 127 * 128 per group: exact). The
// scales are spread to the lanes by in-lane byte shuffles, and each block runs two
// vpdpwssd chains (one chain of four would wait on its latency).
//
// Exactness as in simd_quant_inl.h: the integer block sums are exact; the float scaling
// and the final sum round in another order than the scalar DotQ4_K / DotQ6_K.

// vpshufb index that fills each 128-bit lane with 16-bit word `word` of that lane.
constexpr int32_t PickWord(int word) {
  const int b = 2 * word;
  return b | (b + 1) << 8 | b << 16 | (b + 1) << 24;
}

// y[r] = W_r · x for q4_K rows (kFive false) or q5_K rows (true) [row_begin, row_end) of
// `blocks` blocks each (layout: KMinFormat in simd_quant_inl.h); the constants are set up
// once per call (a row of s110m is three blocks).
// Vector m holds the codes of packed chunk m: its low nibbles (sub-block 2m) in the low
// 256 bits, its high nibbles (sub-block 2m + 1) in the high 256, i.e. elements 64m ..
// 64m + 63 in order, against 64 consecutive activation codes. q5_K's fifth bits: qh,
// broadcast to both halves, rotated per 64-bit lane so that bit 2m (low half) or 2m + 1
// (high half) of each byte lands on its bit 4 (the other bits are masked off).
template <bool kFive>
KVSERVE_SIMD_TARGET void KMinRows512(const uint8_t* w, int64_t row_bytes, int64_t blocks,
                                     int64_t row_begin, int64_t row_end, const Q8KBlock* x,
                                     float* y) {
  constexpr int64_t kBlockBytes = kFive ? model::kQ5_KBlockBytes : model::kQ4_KBlockBytes;
  constexpr int kCodes = kFive ? 48 : 16;  // where the nibbles start
  const __m512i low4 = _mm512_set1_epi8(15);
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  const __m512i nibble_shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
  // Rotate counts 4 - 2m (low half) and 3 - 2m (high half), mod 64.
  __m512i rotate[4];
  for (int m = 0; m < 4; ++m) {
    const int64_t lo = (4 - 2 * m) & 63;
    const int64_t hi = (3 - 2 * m) & 63;
    rotate[m] = _mm512_setr_epi64(lo, lo, lo, lo, hi, hi, hi, hi);
  }
  // Scale words sc0..sc7 are in every 128-bit lane; vector m takes sc_2m in lanes 0-1 and
  // sc_2m+1 in lanes 2-3.
  __m512i pick[4];
  for (int m = 0; m < 4; ++m) {
    pick[m] = _mm512_inserti64x4(_mm512_set1_epi32(PickWord(2 * m)),
                                 _mm256_set1_epi32(PickWord(2 * m + 1)), 1);
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    __m512 acc = _mm512_setzero_ps();
    __m256 acc_min = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* wb = w + r * row_bytes + b * kBlockBytes;
      const Q8KBlock& xb = x[b];
      const __m128i scm = Q4KScaleMinBytes(wb);  // sc0..sc7, m0..m7
      const __m512i scales = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(scm));
      // [m0, m0, m1, m1, ..., m7, m7]: vpmaddwd with the 16 bsums gives m_s times the sum of
      // sub-block s's activation codes in lane s.
      const __m256i c16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scm, scm));
      __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
      const __m512i qh = kFive ? _mm512_broadcast_i64x4(Load256(wb + 16)) : _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) {
        const __m512i packed = _mm512_broadcast_i64x4(Load256(wb + kCodes + 32 * m));
        __m512i q = _mm512_and_si512(_mm512_srlv_epi64(packed, nibble_shift), low4);
        if constexpr (kFive) {
          // q | (rotated & 0x10)
          q = _mm512_ternarylogic_epi64(q, _mm512_rolv_epi64(qh, rotate[m]), bit4, 0xF8);
        }
        const __m512i pairs = _mm512_maddubs_epi16(q, _mm512_loadu_si512(xb.q + 64 * m));
        sum[m & 1] = _mm512_dpwssd_epi32(sum[m & 1], pairs, _mm512_shuffle_epi8(scales, pick[m]));
      }
      const __m256i mins = _mm256_madd_epi16(Load256(xb.bsums), c16);
      uint32_t d2;  // f16 d, dmin
      std::memcpy(&d2, wb, 4);
      const __m128 dd =
          _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d2))), _mm_set1_ps(xb.d));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(sum[0], sum[1])),
                            _mm512_broadcastss_ps(dd), acc);
      acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins),
                                _mm256_broadcastss_ps(_mm_movehdup_ps(dd)), acc_min);
    }
    y[r] = _mm512_reduce_add_ps(_mm512_sub_ps(acc, _mm512_zextps256_ps512(acc_min)));
  }
}

// As KMinRows512 for q6_K rows (layout: Q6_KFormat / Q6KCodes in simd_quant_inl.h). Vector j =
// 2h + p holds elements 64j .. 64j + 63: the 64 ql bytes of half h give the low nibbles
// (p = 0: k = 0, 1) or high nibbles (p = 1: k = 2, 3) in their two 256-bit halves, and qh
// of half h, broadcast to both halves, gives bit pair k by a per-half rotate. Each 128-bit
// lane of vector j is one group of 16 (4j + lane), so its scale is one word per lane.
KVSERVE_SIMD_TARGET void Q6KRows512(const uint8_t* w, int64_t row_bytes, int64_t blocks,
                                    int64_t row_begin, int64_t row_end, const Q8KBlock* x,
                                    float* y) {
  const __m512i low4 = _mm512_set1_epi8(15);
  const __m512i bits45 = _mm512_set1_epi8(0x30);
  // Bit pair k to bits 4-5 of its byte: rotate each 64-bit lane left by 4 - 2k (mod 64);
  // the other bits are masked off.
  const __m512i rotate[2] = {_mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2),
                             _mm512_setr_epi64(0, 0, 0, 0, 62, 62, 62, 62)};
  // Scale bytes regrouped so that lane l of their 32-bit widening holds the scales of
  // groups l, 4 + l, 8 + l, 12 + l, i.e. of lane l of vectors 0..3; vector j picks word
  // 2j (the low half of dword j) in every lane.
  const __m128i by_lane = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512i pick[4];
  for (int j = 0; j < 4; ++j) pick[j] = _mm512_set1_epi32(PickWord(2 * j));
  for (int64_t r = row_begin; r < row_end; ++r) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* wb = w + r * row_bytes + b * model::kQ6_KBlockBytes;
      const Q8KBlock& xb = x[b];
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 192));
      const __m512i scales = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(sc8, by_lane));
      __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(wb + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(Load256(wb + 128 + 32 * h));
#pragma GCC unroll 2
        for (int p = 0; p < 2; ++p) {
          const int j = 2 * h + p;
          const __m512i lo = _mm512_and_si512(p == 0 ? ql : _mm512_srli_epi16(ql, 4), low4);
          // lo | (rotated & 0x30)
          const __m512i q =
              _mm512_ternarylogic_epi64(lo, _mm512_rolv_epi64(qh, rotate[p]), bits45, 0xF8);
          const __m512i pairs = _mm512_maddubs_epi16(q, _mm512_loadu_si512(xb.q + 64 * j));
          sum[p] = _mm512_dpwssd_epi32(sum[p], pairs, _mm512_shuffle_epi8(scales, pick[j]));
        }
      }
      // Codes are q + 32: take off 32 sum_g scale_g bsums_g (at most 2^27 in magnitude).
      const __m256i offset = _mm256_madd_epi16(Load256(xb.bsums), _mm256_cvtepi8_epi16(sc8));
      const __m512i total = _mm512_sub_epi32(_mm512_add_epi32(sum[0], sum[1]),
                                             _mm512_zextsi256_si512(_mm256_slli_epi32(offset, 5)));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_set1_ps(LoadHalf(wb + 208) * xb.d),
                            acc);
    }
    y[r] = _mm512_reduce_add_ps(acc);
  }
}

// --- Batch 1, 32-weight formats ----------------------------------------------------
// As QMatVec8 (simd_quant_inl.h), eight blocks per step with their scales applied once,
// but each vpdpbusd takes two blocks (64 codes) against 64 consecutive activation codes
// (the chunk's codes are first copied out of the 40-byte Q8Blocks into a contiguous
// array), and the eight blocks' lane sums are reduced by one 4 x 4 transpose-add instead
// of vphaddd in 256 bits: fewer instructions per block for q4_0, whose batch 1 is bound
// by them (q8_0 the same way was no faster: its batch 1 already runs near the bandwidth
// bound; docs/performance.md, "Batch 1: memory bandwidth"). A format
// P provides
//   kBytes, kOffset                      as Q4_0Format
//   static __m512i Codes2(const uint8_t* wb): the unsigned codes of blocks wb, wb + kBytes
//   static __m256 Scales8(const uint8_t* wb): d of blocks 0, 2, 4, 6, 1, 3, 5, 7 (the order
//       of SumPairs8's lanes)

// Lane i of the result = the sum of the 16 lanes of block kPairOrder[i], where p[j] holds
// block 2j in lanes 0-7 and block 2j + 1 in lanes 8-15.
constexpr int kPairOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
KVSERVE_SIMD_TARGET inline __m256i SumPairs8(const __m512i (&p)[4]) {
  // Per 128-bit lane L: [sum of p[0]'s four lanes in L, ... p[3]'s].
  const __m512i s01 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
  const __m512i s23 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
  const __m512i t =
      _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
  // Lanes L0 + L1 (blocks 0, 2, 4, 6) and L2 + L3 (blocks 1, 3, 5, 7).
  const __m512i u = _mm512_shuffle_i32x4(t, t, _MM_SHUFFLE(3, 1, 2, 0));
  return _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
}

// q4_0: per block 16 bytes of nibbles after the f16 d (Q4_0Format); 128-bit lanes 0-1 of
// the vector hold block 0's 16 bytes, lanes 2-3 block 1's, and the odd lanes shift right
// by 4, so lane 2k holds a block's low nibbles (elements 0..15), lane 2k + 1 its high
// ones (16..31).
struct Q4_0Pairs {
  static constexpr int64_t kBytes = model::kQ4_0BlockBytes;
  static constexpr int kOffset = 8;
  KVSERVE_SIMD_TARGET static __m512i Codes2(const uint8_t* wb) {
    const __m512i both = _mm512_mask_broadcast_i32x4(
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2))), 0xFF00,
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + kBytes + 2)));
    return _mm512_and_si512(_mm512_srlv_epi64(both, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                            _mm512_set1_epi8(15));
  }
  // The eight d words are words 9v of the 144 bytes: one permute of two 64-byte loads.
  KVSERVE_SIMD_TARGET static __m256 Scales8(const uint8_t* wb) {
    const __m512i lo = _mm512_loadu_si512(wb);               // blocks 0-3 at words 0, 9, 18, 27
    const __m512i hi = _mm512_loadu_si512(wb + 4 * kBytes);  // blocks 4-7 likewise
    // Words 0-7 of the permute (_mm512_set_epi16 lists word 31 first).
    const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 59, 41, 27, 9, 50, 32, 18, 0);
    return _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi16(lo, idx, hi)));
  }
};

// q5_0: per block its 32 codes by Q5Codes (simd_quant_inl.h), block 0 in the low 256 bits,
// block 1 in the high ones; the eight d of blocks 22 bytes apart gathered one by one.
struct Q5_0Pairs {
  static constexpr int64_t kBytes = model::kQ5_0BlockBytes;
  static constexpr int kOffset = 16;
  KVSERVE_SIMD_TARGET static __m512i Codes2(const uint8_t* wb) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(Q5Codes(wb + 2)), Q5Codes(wb + kBytes + 2), 1);
  }
  KVSERVE_SIMD_TARGET static __m256 Scales8(const uint8_t* wb) {
    auto half = [&](int v) {
      uint16_t h;
      std::memcpy(&h, wb + kPairOrder[v] * kBytes, 2);
      return static_cast<short>(h);
    };
    return _mm256_cvtph_ps(
        _mm_setr_epi16(half(0), half(1), half(2), half(3), half(4), half(5), half(6), half(7)));
  }
};

// y[r] = W_r · x for rows [row_begin, row_end) of pair format P, one Q8Block activation row
// x. Precondition: blocks % 8 == 0.
template <typename P>
KVSERVE_SIMD_TARGET void QMatVecPairs(const uint8_t* w, int64_t row_bytes, int64_t blocks,
                                      int64_t row_begin, int64_t row_end, const Q8Block* x,
                                      float* y) {
  alignas(64) int8_t xq[kVec8ChunkBlocks * 32];  // the chunk's codes, in order
  Vec8Rows<P::kBytes>(
      w, row_bytes, blocks, row_begin, row_end, y,
      [&](int64_t b0, int64_t nb, float* xd, int32_t* xoff) KVSERVE_SIMD_TARGET {
        for (int64_t b = 0; b < nb; ++b) {
          std::memcpy(xq + 32 * b, x[b0 + b].q, 32);
          const int64_t from = b0 + (b & ~7) + kPairOrder[b & 7];
          xd[b] = x[from].d;
          xoff[b] = P::kOffset * x[from].sum;
        }
      },
      [&](const uint8_t* wb, int64_t /*b0*/, int64_t b) KVSERVE_SIMD_TARGET {
        __m512i p[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          p[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), P::Codes2(wb + 2 * j * P::kBytes),
                                     _mm512_load_si512(xq + 32 * (b + 2 * j)));
        }
        return Step8{SumPairs8(p), P::Scales8(wb)};
      });
}

// KernelSet::matmul_q4_0 / matmul_q5_0: one activation row by QMatVecPairs<P> when the blocks come
// in eights, otherwise QMatMulT<F>.
template <typename F, typename P>
KVSERVE_SIMD_TARGET void PairsMatMul512(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                        int64_t row_begin, int64_t row_end, const void* xq,
                                        int64_t ldxq, int n, float* y, int64_t ldy) {
  const int64_t blocks = cols / 32;
  if (n != 1 || blocks % 8 != 0) {
    QMatMulT<F>(w, row_bytes, cols, row_begin, row_end, xq, ldxq, n, y, ldy);
    return;
  }
  QMatVecPairs<P>(w, row_bytes, blocks, row_begin, row_end, static_cast<const Q8Block*>(xq), y);
}

// KernelSet::matmul_q4_k / matmul_q6_k (simd_kernels.h): one activation row by Rows
// above, several by QMatMulT<F>.
template <typename F,
          void (*Rows)(const uint8_t*, int64_t, int64_t, int64_t, int64_t, const Q8KBlock*, float*)>
KVSERVE_SIMD_TARGET void KMatMul512(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                    int64_t row_begin, int64_t row_end, const void* xq,
                                    int64_t ldxq, int n, float* y, int64_t ldy) {
  if (n != 1) {
    QMatMulT<F>(w, row_bytes, cols, row_begin, row_end, xq, ldxq, n, y, ldy);
    return;
  }
  Rows(w, row_bytes, cols / 256, row_begin, row_end, static_cast<const Q8KBlock*>(xq), y);
}

// The 512-bit batch-1 k-quant kernels, replacing the 256-bit ones in a KernelSet.
template <typename D>
KernelSet WithVec512QuantKernels(KernelSet k) {
  k.matmul_q4_0 = &PairsMatMul512<Q4_0Format<D>, Q4_0Pairs>;
  k.matmul_q5_0 = &PairsMatMul512<Q5_0Format<D>, Q5_0Pairs>;
  k.matmul_q4_k = &KMatMul512<Q4_KFormat<D>, KMinRows512<false>>;
  k.matmul_q5_k = &KMatMul512<Q5_KFormat<D>, KMinRows512<true>>;
  k.matmul_q6_k = &KMatMul512<Q6_KFormat<D>, Q6KRows512>;
  return k;
}
