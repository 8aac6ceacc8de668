// Batch-1 products of k-quant weights (q4_K, q6_K) with one Q8KBlock activation row in
// 512-bit vectors, for the AVX-512 VNNI level. Not a normal header: simd_avx512_vnni.cc
// includes it inside its anonymous namespace after simd_quant_inl.h (QMatMulT, the
// batched fallback), with KVSERVE_SIMD_TARGET defined.
//
// Why: the 256-bit batch-1 product (QMatMulT with KFormatDot) spends about 100
// instructions per 256 weights (per 32 codes a zeroed vpdpbusd, a vpmulld by the sub-block
// scale and an add; eight vpermd to spread the scales; spills), so tl1b Q4_K_M decoded at
// about 60 % of the bandwidth bound on Zen 5. Here each 64 codes take one vpmaddubsw (u8
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

// W_r · x for one q4_K row of `blocks` blocks (layout: Q4_KFormat in simd_quant_inl.h).
// Vector m holds the codes of packed chunk m: its low nibbles (sub-block 2m) in the low
// 256 bits, its high nibbles (sub-block 2m + 1) in the high 256, i.e. elements 64m ..
// 64m + 63 in order, against 64 consecutive activation codes.
KVSERVE_SIMD_TARGET inline float Q4KRowDot512(const uint8_t* w, const Q8KBlock* x, int64_t blocks) {
  const __m512i low4 = _mm512_set1_epi8(15);
  const __m512i nibble_shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
  // Scale words sc0..sc7 are in every 128-bit lane; vector m takes sc_2m in lanes 0-1 and
  // sc_2m+1 in lanes 2-3.
  __m512i pick[4];
  for (int m = 0; m < 4; ++m) {
    pick[m] = _mm512_inserti64x4(_mm512_set1_epi32(PickWord(2 * m)),
                                 _mm256_set1_epi32(PickWord(2 * m + 1)), 1);
  }
  __m512 acc = _mm512_setzero_ps();
  __m256 acc_min = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + b * model::kQ4_KBlockBytes;
    const Q8KBlock& xb = x[b];
    // Bytes sc0..sc7, m0..m7 (the unpacking of Q4KScaleMin).
    uint32_t u[3];
    std::memcpy(u, wb + 4, 12);
    constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
    const uint32_t sc_lo = u[0] & k6;
    const uint32_t m_lo = u[1] & k6;
    const uint32_t sc_hi = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);
    const uint32_t m_hi = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);
    const __m128i scm = _mm_set_epi32(static_cast<int>(m_hi), static_cast<int>(m_lo),
                                      static_cast<int>(sc_hi), static_cast<int>(sc_lo));
    const __m512i scales = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(scm));
    // [m0, m0, m1, m1, ..., m7, m7]: vpmaddwd with the 16 bsums gives m_s times the sum of
    // sub-block s's activation codes in lane s.
    const __m256i c16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scm, scm));
    __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const __m512i packed = _mm512_broadcast_i64x4(Load256(wb + 16 + 32 * m));
      const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(packed, nibble_shift), low4);
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
    acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_broadcastss_ps(_mm_movehdup_ps(dd)),
                              acc_min);
  }
  return _mm512_reduce_add_ps(acc) - HSum8(acc_min);
}

// W_r · x for one q6_K row (layout: Q6_KFormat / Q6KCodes in simd_quant_inl.h). Vector j =
// 2h + p holds elements 64j .. 64j + 63: the 64 ql bytes of half h give the low nibbles
// (p = 0: k = 0, 1) or high nibbles (p = 1: k = 2, 3) in their two 256-bit halves, and qh
// of half h, broadcast to both halves, gives bit pair k by a per-half rotate. Each 128-bit
// lane of vector j is one group of 16 (4j + lane), so its scale is one word per lane.
KVSERVE_SIMD_TARGET inline float Q6KRowDot512(const uint8_t* w, const Q8KBlock* x, int64_t blocks) {
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
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + b * model::kQ6_KBlockBytes;
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
    acc =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_set1_ps(LoadHalf(wb + 208) * xb.d), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// KernelSet::matmul_q4_k / matmul_q6_k (simd_kernels.h): one activation row by RowDot
// above, several by QMatMulT<F>.
template <typename F, float (*RowDot)(const uint8_t*, const Q8KBlock*, int64_t)>
KVSERVE_SIMD_TARGET void KMatMul512(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                    int64_t row_begin, int64_t row_end, const void* xq,
                                    int64_t ldxq, int n, float* y, int64_t ldy) {
  if (n != 1) {
    QMatMulT<F>(w, row_bytes, cols, row_begin, row_end, xq, ldxq, n, y, ldy);
    return;
  }
  const auto* x = static_cast<const Q8KBlock*>(xq);
  for (int64_t r = row_begin; r < row_end; ++r) y[r] = RowDot(w + r * row_bytes, x, cols / 256);
}

// The 512-bit batch-1 k-quant kernels, replacing the 256-bit ones in a KernelSet.
template <typename D>
KernelSet WithVec512QuantKernels(KernelSet k) {
  k.matmul_q4_k = &KMatMul512<Q4_KFormat<D>, Q4KRowDot512>;
  k.matmul_q6_k = &KMatMul512<Q6_KFormat<D>, Q6KRowDot512>;
  return k;
}
