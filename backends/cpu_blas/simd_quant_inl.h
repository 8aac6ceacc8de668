// Products of quantized weights with quantized activation rows (q8_activations.h), shared
// by every vector level. Not a normal header: simd_avx2.cc, simd_avx_vnni.cc, simd_avx512.cc
// and simd_avx512_vnni.cc include it inside their anonymous namespace after defining
//   KVSERVE_SIMD_TARGET  their function attribute (at least AVX2 + FMA + F16C)
// and pass WithQuantKernels<D> a struct D with
//   static __m256i DotU8S8(__m256i acc, __m256i u, __m256i s):
//       acc[k] += sum_{j<4} u8(u[4k + j]) * s8(s[4k + j]) for the 8 int32 lanes
//   static constexpr bool kUnsignedOffset: whether u may reach 255 (no intermediate
//       16-bit saturation), which lets q8_0 codes run as w + 128
// (MaddubsDot below for AVX2 and AVX-512 F; vpdpbusd on AVX-VNNI and AVX-512 VNNI).
// All levels use 256-bit integer vectors: a q8_0 / q4_0 block is 32 elements, a k-quant
// sub-block 32, so 32 bytes are the natural step, and some AVX-512 cores issue a 512-bit
// integer op as two 256-bit halves anyway (same throughput). Batch-1 decode of q8_0 and
// q4_0 takes eight blocks per step (QMatVec8: their scales once per eight); q4_0 still
// spends about 8 instructions per 18-byte block, which keeps it below the bandwidth bound
// (docs/performance.md, "Batch 1: memory bandwidth"). The AVX-512 VNNI level replaces the
// batch-1 products of q4_0 and the k-quants with 512-bit ones (simd_quant_vec512_inl.h).
//
// Exactness: the integer part of every block product is exact (no saturation: with
// vpmaddubsw the unsigned operand is < 64 or |w| <= 128 against |x| <= 127, so its pair
// sums stay below 2^15; vpdpbusd sums into int32 directly); only the per-block float scaling and
// the final sum round, in a different order than the scalar DotQ* functions.

// Two compiler barriers for the panel kernels (empty asm statements, no instruction), because
// GCC's optimizers otherwise undo their register plan and spill to the stack:
// - InOrder(v): v (a vector) is computed here, as written. The kernels add integer products
//   into a chain one at a time; integer addition is associative, so GCC rewrites a chain as a
//   tree: every product first (most of them stored to the stack), then the sums.
// - Unshared(x): x as a value GCC cannot see through. The 256-bit k-quant kernels handle a
//   panel's two 8-row halves one after the other with the same activation words; without it
//   GCC loads each word once for both halves and keeps all of them (8 x 8 per activation row)
//   on the stack.
// Measured with `kernels_bench --benchmark_filter=BM_QuantLayout/.*path:3` at KVSERVE_BENCH_ISA
// avx2 and avx512vnni on Emerald Rapids (docs/performance.md, "Quantized panel kernels:
// compiler barriers, batch-1 prefetch hint"); the arithmetic, and so every result, is unchanged.
template <typename V>
KVSERVE_SIMD_TARGET inline V InOrder(V v) {
  __asm__("" : "+v"(v));
  return v;
}
inline const uint8_t* Unshared(const uint8_t* x) {
  __asm__("" : "+r"(x));
  return x;
}

// vpmaddubsw + vpmaddwd: 8 int32 sums of 4 adjacent u8 x s8 products.
struct MaddubsDot {
  static constexpr bool kUnsignedOffset = false;  // pairs of (w + 128) x would saturate
  KVSERVE_SIMD_TARGET static __m256i DotU8S8(__m256i acc, __m256i u, __m256i s) {
    const __m256i pairs = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

// Sum of the 8 float lanes.
KVSERVE_SIMD_TARGET inline float HSum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

KVSERVE_SIMD_TARGET inline __m256i Load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// f16 -> f32 with F16C (exact).
KVSERVE_SIMD_TARGET inline float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Block b of activation row i (rows ldxq bytes apart).
template <typename XBlock>
inline const XBlock& XAt(const uint8_t* xq, int64_t ldxq, int i, int64_t b) {
  return reinterpret_cast<const XBlock*>(xq + i * ldxq)[b];
}

// Batched products decode each weight block once (codes unpacked to bytes, scales to
// vectors) and then multiply it with every activation row, instead of redoing the
// unpacking per row: at batch 16 the decode is 1/16 of the work per row. Each format F
// below provides
//   struct Block;                        the decoded block (registers, or L1 when spilled)
//   using XBlock;                        the activation block it meets (q8_activations.h)
//   kElems, kBytes                       elements and bytes of one weight block
//   static void Decode(const uint8_t* wb, Block* out)
//   static __m256 Dot(const Block&, const XBlock& x, __m256 acc):
//       acc + 8 float lanes whose sum is W_block · x_block
// and QMatMulT runs them: per weight row, per block, decode once, then every row.

// Integer accumulator holding `v` in lane 0 and 0 elsewhere: the block's offset
// correction enters the dot product exactly, before any float rounding.
KVSERVE_SIMD_TARGET inline __m256i Lane0(int32_t v) {
  return _mm256_zextsi128_si256(_mm_cvtsi32_si128(v));
}

// q8_0 (34 bytes per 32: f16 d, int8 w) x Q8Block. With vpdpbusd the codes become
// unsigned as w + 128 (xor 0x80) and 128 sum x comes off in the integer accumulator;
// vpmaddubsw would saturate on (w + 128) x pairs, so that level multiplies |w| by x with
// w's sign instead (one more instruction per row).
template <typename D>
struct Q8_0Format {
  static constexpr int64_t kElems = 32;
  static constexpr int64_t kBytes = model::kQ8_0BlockBytes;
  using XBlock = Q8Block;
  struct Block {
    __m256i u;  // w + 128 (offset form) or |w| (sign form), as unsigned bytes
    __m256i w;  // the signed codes (sign form only)
    float d;
  };
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block* out) {
    out->w = Load256(wb + 2);
    out->u = D::kUnsignedOffset ? _mm256_xor_si256(out->w, _mm256_set1_epi8(-128))
                                : _mm256_sign_epi8(out->w, out->w);
    out->d = LoadHalf(wb);
  }
  KVSERVE_SIMD_TARGET static __m256 Dot(const Block& w, const XBlock& x, __m256 acc) {
    __m256i dot;
    if constexpr (D::kUnsignedOffset) {
      dot = D::DotU8S8(Lane0(-128 * x.sum), w.u, Load256(x.q));
    } else {
      dot = D::DotU8S8(_mm256_setzero_si256(), w.u, _mm256_sign_epi8(Load256(x.q), w.w));
    }
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(w.d * x.d), acc);
  }
  // For QMatVec8: the integer product of the block at wb with 32 activation codes, short
  // of kOffset * sum x (offset form: the codes run as w + 128).
  static constexpr int kOffset = D::kUnsignedOffset ? 128 : 0;
  KVSERVE_SIMD_TARGET static __m256i IntDot(const uint8_t* wb, const int8_t* xq) {
    Block b;
    Decode(wb, &b);  // (its scale, unused here, is dropped by the compiler)
    const __m256i x = Load256(xq);
    return D::DotU8S8(_mm256_setzero_si256(), b.u,
                      D::kUnsignedOffset ? x : _mm256_sign_epi8(x, b.w));
  }
};

// The 32 nibbles of a q4_0 block (q5_0 / q5_1: their low 4 bits) at qs, element j in
// byte j: low nibbles are elements 0..15, high nibbles 16..31. Both halves hold the 16
// bytes (a broadcast load); the high half shifts its 32-bit words right by 4, so after
// the mask each byte holds its own high nibble.
KVSERVE_SIMD_TARGET inline __m256i Nibbles32(const uint8_t* qs) {
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                          _mm256_set1_epi8(15));
}

// The 32 codes (0..31) of a q5_0 or q5_1 block whose qh[4] sit at qh, its nibbles at
// qh + 4 (model::Q5Code): Nibbles32, plus 16 in byte j where bit j of the little-endian
// 32-bit qh is set. vpshufb (within each 128-bit half, both of which hold the four qh
// bytes) copies qh byte j / 8 to byte j, and the mask tests its bit j % 8.
KVSERVE_SIMD_TARGET inline __m256i Q5Codes(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(bits)),
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i mask = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i fifth = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask),
                                         _mm256_set1_epi8(16));
  return _mm256_or_si256(Nibbles32(qh + 4), fifth);
}

// The 32-weight formats with unsigned codes and a fixed offset, w = d (q - kOffset), x
// Q8Block: sum (q - off) x = sum q x - off sum x. C gives kBytes, kOffset and
// static __m256i Codes(const uint8_t* wb) (the unsigned codes, element j in byte j).
template <typename D, typename C>
struct Offset32Format {
  static constexpr int64_t kElems = 32;
  static constexpr int64_t kBytes = C::kBytes;
  using XBlock = Q8Block;
  struct Block {
    __m256i u;  // the unsigned codes
    float d;
  };
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block* out) {
    out->u = C::Codes(wb);
    out->d = LoadHalf(wb);
  }
  KVSERVE_SIMD_TARGET static __m256 Dot(const Block& w, const XBlock& x, __m256 acc) {
    const __m256i dot = D::DotU8S8(Lane0(-kOffset * x.sum), w.u, Load256(x.q));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(w.d * x.d), acc);
  }
  // As Q8_0Format::IntDot: sum q x, short of kOffset sum x.
  static constexpr int kOffset = C::kOffset;
  KVSERVE_SIMD_TARGET static __m256i IntDot(const uint8_t* wb, const int8_t* xq) {
    return D::DotU8S8(_mm256_setzero_si256(), C::Codes(wb), Load256(xq));
  }
};

// q4_0 (18 bytes per 32: f16 d, 16 bytes of nibbles; w = nibble - 8; low nibbles are
// elements 0..15, high nibbles 16..31).
struct Q4_0RowCodes {
  static constexpr int64_t kBytes = model::kQ4_0BlockBytes;
  static constexpr int kOffset = 8;
  KVSERVE_SIMD_TARGET static __m256i Codes(const uint8_t* wb) { return Nibbles32(wb + 2); }
};

// q5_0 (22 bytes per 32: f16 d, qh[4], 16 bytes of nibbles; w = q - 16; Q5Codes).
struct Q5_0RowCodes {
  static constexpr int64_t kBytes = model::kQ5_0BlockBytes;
  static constexpr int kOffset = 16;
  KVSERVE_SIMD_TARGET static __m256i Codes(const uint8_t* wb) { return Q5Codes(wb + 2); }
};

template <typename D>
using Q4_0Format = Offset32Format<D, Q4_0RowCodes>;
template <typename D>
using Q5_0Format = Offset32Format<D, Q5_0RowCodes>;

// q5_1 (24 bytes per 32: f16 d, f16 m, qh[4], 16 bytes of nibbles; w = d q + m) x
// Q8Block: d d_x sum q x + m d_x sum x, the second term in lane 0.
template <typename D>
struct Q5_1Format {
  static constexpr int64_t kElems = 32;
  static constexpr int64_t kBytes = model::kQ5_1BlockBytes;
  using XBlock = Q8Block;
  struct Block {
    __m256i u;  // the unsigned codes
    float d;
    float m;
  };
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block* out) {
    out->u = Q5Codes(wb + 4);
    out->d = LoadHalf(wb);
    out->m = LoadHalf(wb + 2);
  }
  KVSERVE_SIMD_TARGET static __m256 Dot(const Block& w, const XBlock& x, __m256 acc) {
    const __m256i dot = D::DotU8S8(_mm256_setzero_si256(), w.u, Load256(x.q));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(w.d * x.d), acc);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(Lane0(x.sum)), _mm256_set1_ps(w.m * x.d), acc);
  }
};

// The k-quants share one decoded form against Q8KBlock: eight vectors of 32 unsigned
// codes (vector v covers elements 32v..32v+31), an int32 scale per lane of each, and an
// int16 vector c16 whose vpmaddwd with the activation's 16 bsums gives the offset term:
//   W · x = d d_x sum_v sum_lanes(sc_v * dot_v) - dc d_x sum_lanes(madd(bsums, c16)).
struct KBlock {
  __m256i q[8];
  __m256i sc[8];
  __m256i c16;
  float d;
  float dc;
};

template <typename D>
struct KFormatDot {
  using XBlock = Q8KBlock;
  using Block = KBlock;
  KVSERVE_SIMD_TARGET static __m256 Dot(const KBlock& w, const XBlock& x, __m256 acc) {
    __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      const __m256i dot = D::DotU8S8(_mm256_setzero_si256(), w.q[v], Load256(x.q + 32 * v));
      sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(dot, w.sc[v]));
    }
    const __m256i offset = _mm256_madd_epi16(Load256(x.bsums), w.c16);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(w.d * x.d), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(offset), _mm256_set1_ps(w.dc * x.d), acc);
  }
};

// q4_K's 12 scale bytes unpacked (model::Q4KScaleMin): bytes 0-7 = sc0..sc7, bytes 8-15 =
// m0..m7. As 32-bit words u0, u1, u2 (block bytes 4-15): sc0-3 / m0-3 are the low 6 bits
// of u0 / u1; sc4-7 / m4-7 take their low 4 bits from the nibbles of u2 and their high 2
// bits from the top bits of u0 / u1. All four result words at once.
KVSERVE_SIMD_TARGET inline __m128i Q4KScaleMinBytes(const uint8_t* wb) {
  const __m128i head = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb));  // d, u0-u2
  const __m128i low = _mm_srlv_epi32(_mm_shuffle_epi32(head, _MM_SHUFFLE(3, 2, 3, 1)),
                                     _mm_setr_epi32(0, 0, 0, 4));        // u0, u2, u1, u2 >> 4
  const __m128i top = _mm_shuffle_epi32(head, _MM_SHUFFLE(2, 2, 1, 1));  // u0, u0, u1, u1
  return _mm_or_si128(
      _mm_and_si128(low, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)),
      _mm_and_si128(_mm_srli_epi32(top, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
}

// q4_K sub-block scales and mins as int32 lanes (lane s = sc_s / m_s).
KVSERVE_SIMD_TARGET inline void Q4KScaleMin(const uint8_t* wb, __m256i* sc, __m256i* m) {
  const __m128i scm = Q4KScaleMinBytes(wb);
  *sc = _mm256_cvtepu8_epi32(scm);
  *m = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(scm, scm));
}

// q4_K sub-block scales as int32 lanes (lane s = sc_s) and the offset weights
// [m0, m0, m1, m1, ..., m7, m7] as int16 (vpmaddwd with the 16 bsums gives m_s (bsums[2s]
// + bsums[2s + 1]) in lane s).
KVSERVE_SIMD_TARGET inline void Q4KScales(const uint8_t* wb, __m256i* sc, __m256i* c16) {
  __m256i m;
  Q4KScaleMin(wb, sc, &m);
  *c16 = _mm256_or_si256(m, _mm256_slli_epi32(m, 16));  // m_s < 64 in both int16 halves
}

// The 256 q4_K codes as 8 vectors, q[v] = elements 32v..32v+31 (chunk j of 32 packed
// bytes at qs holds sub-block 2j in its low nibbles, 2j + 1 in its high ones; qs is the
// block's byte 16). Also q5_K's low 4 bits (qs at byte 48).
KVSERVE_SIMD_TARGET inline void Q4KCodes(const uint8_t* qs, __m256i (&q)[8]) {
  const __m256i low4 = _mm256_set1_epi8(15);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i packed = Load256(qs + 32 * j);
    q[2 * j] = _mm256_and_si256(packed, low4);
    q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
  }
}

// The 256 q5_K codes (0..31) as 8 vectors, as Q4KCodes: the low 4 bits from the nibbles
// at byte 48, the fifth bit of q[v] lane l from bit v of qh[l] (qh: bytes 16-47;
// model::Q5KQuant). A 16-bit shift right by v < 8 brings bit v of each byte to its bit 0
// (the bits it shifts in from the high byte land above bit 0 and are masked off).
KVSERVE_SIMD_TARGET inline void Q5KCodes(const uint8_t* wb, __m256i (&q)[8]) {
  Q4KCodes(wb + 48, q);
  const __m256i qh = Load256(wb + 16);
  const __m256i bit0 = _mm256_set1_epi8(1);
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) {
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, v), bit0);
    q[v] = _mm256_or_si256(q[v], _mm256_slli_epi16(high, 4));
  }
}

// The 256 unsigned q6_K codes as 8 vectors, q[v] = elements 32v..32v+31 (layout in
// model/quant.h, Q6KQuant: v = 4h + k takes ql's nibbles and qh's bit pair k of half h).
KVSERVE_SIMD_TARGET inline void Q6KCodes(const uint8_t* wb, __m256i (&q)[8]) {
  const __m256i low4 = _mm256_set1_epi8(15);
  const __m256i low2 = _mm256_set1_epi8(3);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = Load256(wb + 64 * h);       // k = 0 (low), 2 (high nibbles)
    const __m256i ql1 = Load256(wb + 64 * h + 32);  // k = 1 (low), 3 (high nibbles)
    const __m256i qh = Load256(wb + 128 + 32 * h);
    const __m256i lo[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                           _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                           _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), low2);
      q[4 * h + k] = _mm256_or_si256(lo[k], _mm256_slli_epi16(high, 4));
    }
  }
}

// The codes of a q4_K block (kFive false) or a q5_K block (true) at wb.
template <bool kFive>
KVSERVE_SIMD_TARGET inline void KMinCodes(const uint8_t* wb, __m256i (&q)[8]) {
  if constexpr (kFive) {
    Q5KCodes(wb, q);
  } else {
    Q4KCodes(wb + 16, q);
  }
}

// q4_K (144 bytes per 256: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128
// bytes of nibbles; sub-block s = elements 32s..32s+31, w = d sc_s q - dmin m_s; chunk j
// of 32 packed bytes holds sub-block 2j in its low nibbles, 2j + 1 in its high ones) and
// q5_K (176 bytes per 256: the same head and math, codes 0..31 by Q5KCodes): kFive.
template <typename D, bool kFive>
struct KMinFormat : KFormatDot<D> {
  static constexpr int64_t kElems = 256;
  static constexpr int64_t kBytes = kFive ? model::kQ5_KBlockBytes : model::kQ4_KBlockBytes;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, KBlock* out) {
    __m256i sc;
    Q4KScales(wb, &sc, &out->c16);
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      out->sc[v] = _mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(v));
    }
    KMinCodes<kFive>(wb, out->q);
    out->d = LoadHalf(wb);
    out->dc = LoadHalf(wb + 2);
  }
};

template <typename D>
using Q4_KFormat = KMinFormat<D, false>;
template <typename D>
using Q5_KFormat = KMinFormat<D, true>;

// q6_K (210 bytes per 256: 128 bytes of low nibbles ql, 64 of high bit pairs qh, 16 int8
// scales, f16 d; w = d scale_g (q - 32) over 16 groups g of 16; layout in model/quant.h,
// Q6KQuant): vector v = 4h + k holds elements 128h + 32k ..+31, groups 8h + 2k (lanes
// 0-3) and 8h + 2k + 1 (lanes 4-7); the offset is 32 d sum_g scale_g sum x.
template <typename D>
struct Q6_KFormat : KFormatDot<D> {
  static constexpr int64_t kElems = 256;
  static constexpr int64_t kBytes = model::kQ6_KBlockBytes;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, KBlock* out) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 192));
    out->c16 = _mm256_cvtepi8_epi16(sc8);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      // Groups 8h .. 8h + 7 as int32.
      const __m256i sc32 = _mm256_cvtepi8_epi32(h == 0 ? sc8 : _mm_srli_si128(sc8, 8));
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        // Lanes 0-3: scale of group 8h + 2k; lanes 4-7: of group 8h + 2k + 1.
        out->sc[4 * h + k] = _mm256_permutevar8x32_epi32(
            sc32, _mm256_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                    2 * k + 1));
      }
    }
    Q6KCodes(wb, out->q);
    out->d = LoadHalf(wb + 208);
    out->dc = 32.0f * out->d;
  }
};

// --- Interleaved activations (q8_activations.h, Q8x8Block) ---------------------------
// The decoded codes of 256 weights are transposed like the activations, so vector k
// lane v holds word k of (sub-)block v: a dot product chain over k = 0..3 gives in lane v
// the sum over elements 32v .. 32v + 15 (group 2v of 16), over k = 4..7 elements
// 32v + 16 .. 32v + 31 (group 2v + 1), and each block's scale applies once per lane.

// out[k] lane v = in[v] lane k (32-bit lanes).
KVSERVE_SIMD_TARGET inline void Transpose8x8(const __m256i (&in)[8], __m256i (&out)[8]) {
  const __m256i t0 = _mm256_unpacklo_epi32(in[0], in[1]);
  const __m256i t1 = _mm256_unpackhi_epi32(in[0], in[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(in[2], in[3]);
  const __m256i t3 = _mm256_unpackhi_epi32(in[2], in[3]);
  const __m256i t4 = _mm256_unpacklo_epi32(in[4], in[5]);
  const __m256i t5 = _mm256_unpackhi_epi32(in[4], in[5]);
  const __m256i t6 = _mm256_unpacklo_epi32(in[6], in[7]);
  const __m256i t7 = _mm256_unpackhi_epi32(in[6], in[7]);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2);  // words 0 | 4 of in[0..3]
  const __m256i u1 = _mm256_unpackhi_epi64(t0, t2);  // 1 | 5
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3);  // 2 | 6
  const __m256i u3 = _mm256_unpackhi_epi64(t1, t3);  // 3 | 7
  const __m256i u4 = _mm256_unpacklo_epi64(t4, t6);  // the same of in[4..7]
  const __m256i u5 = _mm256_unpackhi_epi64(t4, t6);
  const __m256i u6 = _mm256_unpacklo_epi64(t5, t7);
  const __m256i u7 = _mm256_unpackhi_epi64(t5, t7);
  out[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
  out[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
  out[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
  out[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
  out[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
  out[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
  out[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
  out[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

// Two dot-product chains over interleaved codes: *lo lane v = sum over group 2v, *hi
// over group 2v + 1 (see above). `s` are the activation codes; with kSign (vpmaddubsw
// levels, q8_0) the weights `q` are |w| and each activation takes the sign of `w`.
template <typename D, bool kSign>
KVSERVE_SIMD_TARGET inline void DotGroups(const __m256i (&q)[8], const __m256i* w, const int8_t* x,
                                          __m256i* lo, __m256i* hi) {
  __m256i a = _mm256_setzero_si256();
  __m256i b = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    __m256i xa = Load256(x + 32 * k);
    __m256i xb = Load256(x + 32 * (k + 4));
    if constexpr (kSign) {
      xa = _mm256_sign_epi8(xa, w[k]);
      xb = _mm256_sign_epi8(xb, w[k + 4]);
    }
    a = D::DotU8S8(a, q[k], xa);
    b = D::DotU8S8(b, q[k + 4], xb);
  }
  *lo = a;
  *hi = b;
}

// k-quants against interleaved Q8KBlock rows: lane v of the two chains is group 2v /
// 2v + 1, scaled by sc_lo / sc_hi (q4_K: both sc of sub-block v; q6_K: the groups' own).
struct KBlockIl {
  __m256i q[8];
  __m256i sc_lo;
  __m256i sc_hi;
  __m256i c16;
  float d;
  float dc;
};

template <typename D>
struct KFormatIlDot {
  using XBlock = Q8KBlock;
  using Block = KBlockIl;
  KVSERVE_SIMD_TARGET static __m256 Dot(const KBlockIl& w, const XBlock& x, __m256 acc) {
    __m256i lo;
    __m256i hi;
    DotGroups<D, false>(w.q, nullptr, x.q, &lo, &hi);
    const __m256i sum =
        _mm256_add_epi32(_mm256_mullo_epi32(lo, w.sc_lo), _mm256_mullo_epi32(hi, w.sc_hi));
    const __m256i offset = _mm256_madd_epi16(Load256(x.bsums), w.c16);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(w.d * x.d), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(offset), _mm256_set1_ps(w.dc * x.d), acc);
  }
};

// q4_K (kFive false) and q5_K (true), as KMinFormat.
template <typename D, bool kFive>
struct KMinFormatIl : KFormatIlDot<D> {
  static constexpr int64_t kElems = 256;
  static constexpr int64_t kBytes = KMinFormat<D, kFive>::kBytes;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, KBlockIl* out) {
    Q4KScales(wb, &out->sc_lo, &out->c16);
    out->sc_hi = out->sc_lo;
    __m256i q[8];
    KMinCodes<kFive>(wb, q);
    Transpose8x8(q, out->q);
    out->d = LoadHalf(wb);
    out->dc = LoadHalf(wb + 2);
  }
};

template <typename D>
using Q4_KFormatIl = KMinFormatIl<D, false>;
template <typename D>
using Q5_KFormatIl = KMinFormatIl<D, true>;

template <typename D>
struct Q6_KFormatIl : KFormatIlDot<D> {
  static constexpr int64_t kElems = 256;
  static constexpr int64_t kBytes = model::kQ6_KBlockBytes;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, KBlockIl* out) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 192));
    out->c16 = _mm256_cvtepi8_epi16(sc8);
    // Even groups' scales to bytes 0-7, odd groups' to bytes 8-15.
    const __m128i split =
        _mm_shuffle_epi8(sc8, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    out->sc_lo = _mm256_cvtepi8_epi32(split);
    out->sc_hi = _mm256_cvtepi8_epi32(_mm_srli_si128(split, 8));
    __m256i q[8];
    Q6KCodes(wb, q);
    Transpose8x8(q, out->q);
    out->d = LoadHalf(wb + 208);
    out->dc = 32.0f * out->d;
  }
};

// Eight 32-weight blocks against a Q8x8Block: lane v of the chains is block v, whose
// integer sum takes off off * sum x (q4_0: 8; q5_0: 16; q8_0 as w + 128: 128) before its
// scale d_w d_x applies (q5_1: plus m_w d_x sum x).
struct Block8 {
  __m256i q[8];  // interleaved unsigned codes
  __m256i w[8];  // interleaved signed codes (q8_0 in sign form only)
  __m256 d;      // d_w of the 8 blocks
  __m256 m;      // m_w of the 8 blocks (q5_1 only)
};

template <typename D, int kOffsetShift, bool kSign>
KVSERVE_SIMD_TARGET inline __m256 DotBlock8(const Block8& w, const Q8x8Block& x, __m256 acc) {
  __m256i lo;
  __m256i hi;
  DotGroups<D, kSign>(w.q, w.w, x.q, &lo, &hi);
  __m256i sum = _mm256_add_epi32(lo, hi);
  if constexpr (kOffsetShift > 0) {
    sum = _mm256_sub_epi32(sum, _mm256_slli_epi32(Load256(x.sum), kOffsetShift));
  }
  const __m256 scale = _mm256_mul_ps(w.d, _mm256_loadu_ps(x.d));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scale, acc);
}

// Eight consecutive blocks of a 32-weight format F (Q8_0Format, Offset32Format or
// Q5_1Format, whose Block has the unsigned codes u, d and, for q8_0, the signed codes w,
// for q5_1 the min m), decoded and transposed for the interleaved layout; kSigned also
// transposes w (q8_0 in sign form), kMin gathers m (q5_1).
template <typename F, bool kSigned, bool kMin = false>
KVSERVE_SIMD_TARGET inline void DecodeEight(const uint8_t* wb, Block8* out) {
  __m256i u[8];
  __m256i w[8];
  alignas(32) float d[8];
  alignas(32) float m[8];
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) {
    typename F::Block b;
    F::Decode(wb + v * F::kBytes, &b);
    u[v] = b.u;
    if constexpr (kSigned) w[v] = b.w;
    d[v] = b.d;
    if constexpr (kMin) m[v] = b.m;
  }
  Transpose8x8(u, out->q);
  if constexpr (kSigned) Transpose8x8(w, out->w);
  out->d = _mm256_load_ps(d);
  if constexpr (kMin) out->m = _mm256_load_ps(m);
}

template <typename D>
struct Q8_0FormatIl {
  static constexpr int64_t kElems = 256;
  static constexpr int64_t kBytes = 8 * model::kQ8_0BlockBytes;
  using XBlock = Q8x8Block;
  using Block = Block8;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block8* out) {
    DecodeEight<Q8_0Format<D>, !D::kUnsignedOffset>(wb, out);
  }

  KVSERVE_SIMD_TARGET static __m256 Dot(const Block8& w, const XBlock& x, __m256 acc) {
    if constexpr (D::kUnsignedOffset) return DotBlock8<D, 7, false>(w, x, acc);
    return DotBlock8<D, 0, true>(w, x, acc);
  }
};

// Offset32Format's q4_0 (offset 8 = 1 << 3) and q5_0 (16 = 1 << 4), interleaved.
template <typename D, typename C>
struct Offset32FormatIl {
  static_assert(C::kOffset == 8 || C::kOffset == 16);
  static constexpr int kShift = C::kOffset == 8 ? 3 : 4;
  static constexpr int64_t kElems = 256;
  static constexpr int64_t kBytes = 8 * C::kBytes;
  using XBlock = Q8x8Block;
  using Block = Block8;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block8* out) {
    DecodeEight<Offset32Format<D, C>, false>(wb, out);
  }

  KVSERVE_SIMD_TARGET static __m256 Dot(const Block8& w, const XBlock& x, __m256 acc) {
    return DotBlock8<D, kShift, false>(w, x, acc);
  }
};

template <typename D>
using Q4_0FormatIl = Offset32FormatIl<D, Q4_0RowCodes>;
template <typename D>
using Q5_0FormatIl = Offset32FormatIl<D, Q5_0RowCodes>;

// q5_1, interleaved: DotBlock8 without offset, plus m_w d_x sum x per lane.
template <typename D>
struct Q5_1FormatIl {
  static constexpr int64_t kElems = 256;
  static constexpr int64_t kBytes = 8 * model::kQ5_1BlockBytes;
  using XBlock = Q8x8Block;
  using Block = Block8;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block8* out) {
    DecodeEight<Q5_1Format<D>, false, true>(wb, out);
  }

  KVSERVE_SIMD_TARGET static __m256 Dot(const Block8& w, const XBlock& x, __m256 acc) {
    acc = DotBlock8<D, 0, false>(w, x, acc);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(Load256(x.sum)),
                           _mm256_mul_ps(w.m, _mm256_loadu_ps(x.d)), acc);
  }
};

// --- Batch 1, 32-weight formats ----------------------------------------------------
// Per block, QMatMulT's pair loop spends more instructions on the block's scale (an f16
// load and convert, a scalar multiply, a broadcast, an int-to-float convert and an FMA)
// than on its codes, which leaves q4_0 decode instruction-bound at about half the memory
// bandwidth (docs/performance.md). QMatVec8 takes eight blocks per step: each block's
// integer product goes to its own accumulator, the eight are summed lane-wise into one
// vector whose lane v is block v's product (Sum8Lanes), and the offset, the scales and
// the float accumulation run once per eight blocks on that vector.

// Lane v of the result = the sum of the eight lanes of s[v].
KVSERVE_SIMD_TARGET inline __m256i Sum8Lanes(const __m256i (&s)[8]) {
  const __m256i t0 = _mm256_hadd_epi32(s[0], s[1]);
  const __m256i t1 = _mm256_hadd_epi32(s[2], s[3]);
  const __m256i t2 = _mm256_hadd_epi32(s[4], s[5]);
  const __m256i t3 = _mm256_hadd_epi32(s[6], s[7]);
  const __m256i u0 = _mm256_hadd_epi32(t0, t1);  // s[0..3]: lanes 0-3 | lanes 4-7
  const __m256i u1 = _mm256_hadd_epi32(t2, t3);  // s[4..7]
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                          _mm256_permute2x128_si256(u0, u1, 0x31));
}

// The f16 numbers at p, p + stride, ..., p + 7 stride as floats (exact).
KVSERVE_SIMD_TARGET inline __m256 LoadHalves8(const uint8_t* p, int64_t stride) {
  auto half = [&](int v) {
    uint16_t h;
    std::memcpy(&h, p + v * stride, 2);
    return static_cast<short>(h);
  };
  return _mm256_cvtph_ps(
      _mm_setr_epi16(half(0), half(1), half(2), half(3), half(4), half(5), half(6), half(7)));
}

// Blocks per column chunk of the eight-block batch-1 products (the activation scales and
// offsets of a chunk are gathered into arrays on the stack first: 2 KiB).
constexpr int64_t kVec8ChunkBlocks = 256;

// One step of an eight-block batch-1 product: the eight blocks' integer products (short
// of their activation offsets) and their weight scales, in the step's lane order.
struct Step8 {
  __m256i sums;
  __m256 scales;
};

// The column-chunk and row loops of the batch-1 products that take eight 32-weight blocks
// per step (QMatVec8 below, QMatVecPairs in simd_quant_vec512_inl.h): y[r] = the sum over
// steps of (sums - xoff) * scales * xd, lane by lane. Per chunk of up to kVec8ChunkBlocks
// blocks from block b0, prepare(b0, nb, xd, xoff) fills the chunk's activation scales xd
// and offsets xoff (in the steps' lane order); per row and eight blocks at wb
// (chunk-relative block b), step(wb, b0, b) returns their Step8. kBytes: bytes per block.
// Precondition: blocks % 8 == 0.
template <int64_t kBytes, typename Prepare, typename Step>
KVSERVE_SIMD_TARGET inline void Vec8Rows(const uint8_t* w, int64_t row_bytes, int64_t blocks,
                                         int64_t row_begin, int64_t row_end, float* y,
                                         Prepare&& prepare, Step&& step) {
  alignas(32) float xd[kVec8ChunkBlocks];
  alignas(32) int32_t xoff[kVec8ChunkBlocks];
  for (int64_t b0 = 0; b0 < blocks; b0 += kVec8ChunkBlocks) {
    const int64_t nb = std::min(kVec8ChunkBlocks, blocks - b0);
    prepare(b0, nb, xd, xoff);
    for (int64_t r = row_begin; r < row_end; ++r) {
      const uint8_t* wr = w + r * row_bytes + b0 * kBytes;
      __m256 acc = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; b += 8) {
        const Step8 s = step(wr + b * kBytes, b0, b);
        const __m256i sum = _mm256_sub_epi32(s.sums, Load256(xoff + b));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum),
                              _mm256_mul_ps(s.scales, _mm256_load_ps(xd + b)), acc);
      }
      y[r] = (b0 == 0 ? 0.0f : y[r]) + HSum8(acc);
    }
  }
}

// y[r] = W_r · x for rows [row_begin, row_end) of a 32-weight format F with IntDot, one
// Q8Block activation row x. Precondition: blocks % 8 == 0.
template <typename F>
KVSERVE_SIMD_TARGET void QMatVec8(const uint8_t* w, int64_t row_bytes, int64_t blocks,
                                  int64_t row_begin, int64_t row_end, const Q8Block* x, float* y) {
  Vec8Rows<F::kBytes>(
      w, row_bytes, blocks, row_begin, row_end, y,
      [&](int64_t b0, int64_t nb, float* xd, int32_t* xoff) KVSERVE_SIMD_TARGET {
        for (int64_t b = 0; b < nb; ++b) {
          xd[b] = x[b0 + b].d;
          xoff[b] = F::kOffset * x[b0 + b].sum;
        }
      },
      [&](const uint8_t* wb, int64_t b0, int64_t b) KVSERVE_SIMD_TARGET {
        __m256i s[8];
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) s[v] = F::IntDot(wb + v * F::kBytes, x[b0 + b + v].q);
        return Step8{Sum8Lanes(s), LoadHalves8(wb, F::kBytes)};
      });
}

// Activation rows per pass of QMatMulT (their float accumulators live on the stack:
// 2 x 64 x 32 bytes); more rows run in several passes over the weights.
constexpr int kQRowsPerPass = 64;

// KernelSet::matmul_q* (simd_kernels.h) for format F: every weight row once against the
// n activation rows, each block decoded once per pass.
template <typename F>
KVSERVE_SIMD_TARGET void QMatMulT(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                  int64_t row_begin, int64_t row_end, const void* xq, int64_t ldxq,
                                  int n, float* y, int64_t ldy) {
  using XBlock = typename F::XBlock;
  const int64_t blocks = cols / F::kElems;
  __m256 acc[kQRowsPerPass];
  __m256 acc_odd[kQRowsPerPass];
  for (int i0 = 0; i0 < n; i0 += kQRowsPerPass) {
    const int nn = std::min(kQRowsPerPass, n - i0);
    const uint8_t* x = static_cast<const uint8_t*>(xq) + i0 * ldxq;
    if constexpr (requires { F::IntDot; }) {
      if (nn == 1 && blocks % 8 == 0) {
        QMatVec8<F>(w, row_bytes, blocks, row_begin, row_end, reinterpret_cast<const Q8Block*>(x),
                    y + i0 * ldy);
        continue;
      }
    }
    for (int64_t r = row_begin; r < row_end; ++r) {
      const uint8_t* wr = w + r * row_bytes;
      if (nn == 1) {
        // Batch 1: the accumulators in registers (through the stack, each block would
        // wait for the previous one's store), two of them for the 32-weight formats:
        // with one, each block waits for the previous block's FMA (its latency, not its
        // throughput), which caps a core below the memory bandwidth it could read.
        __m256 a0 = _mm256_setzero_ps();
        __m256 a1 = _mm256_setzero_ps();
        // (k-quant blocks are 256 weights: their chain is long enough, and two decoded
        // blocks would not fit in the registers.)
        constexpr int64_t kPair = F::kElems == 32 ? 2 : 1 << 30;
        int64_t b = 0;
        for (; b + kPair <= blocks; b += 2) {
          typename F::Block w0;
          typename F::Block w1;
          F::Decode(wr + b * F::kBytes, &w0);
          F::Decode(wr + (b + 1) * F::kBytes, &w1);
          a0 = F::Dot(w0, XAt<XBlock>(x, ldxq, 0, b), a0);
          a1 = F::Dot(w1, XAt<XBlock>(x, ldxq, 0, b + 1), a1);
        }
        for (; b < blocks; ++b) {
          typename F::Block w0;
          F::Decode(wr + b * F::kBytes, &w0);
          a0 = F::Dot(w0, XAt<XBlock>(x, ldxq, 0, b), a0);
        }
        y[i0 * ldy + r] = HSum8(_mm256_add_ps(a0, a1));
        continue;
      }
      // The same sums as batch 1 above, so a row's result does not depend on n (batch
      // invariance): 32-weight formats' odd blocks in a second chain, added at the end.
      for (int i = 0; i < nn; ++i) acc[i] = acc_odd[i] = _mm256_setzero_ps();
      for (int64_t b = 0; b < blocks; ++b) {
        typename F::Block wb;
        F::Decode(wr + b * F::kBytes, &wb);
        __m256* chain = F::kElems == 32 && b % 2 == 1 ? acc_odd : acc;
        for (int i = 0; i < nn; ++i) chain[i] = F::Dot(wb, XAt<XBlock>(x, ldxq, i, b), chain[i]);
      }
      for (int i = 0; i < nn; ++i) {
        y[(i0 + i) * ldy + r] = HSum8(_mm256_add_ps(acc[i], acc_odd[i]));
      }
    }
  }
}

// The quantized kernels of the including level, added to a KernelSet.
template <typename D>
constexpr KernelSet WithQuantKernels(KernelSet k) {
  k.matmul_q8_0 = &QMatMulT<Q8_0Format<D>>;
  k.matmul_q4_0 = &QMatMulT<Q4_0Format<D>>;
  k.matmul_q5_0 = &QMatMulT<Q5_0Format<D>>;
  k.matmul_q5_1 = &QMatMulT<Q5_1Format<D>>;
  k.matmul_q4_k = &QMatMulT<Q4_KFormat<D>>;
  k.matmul_q5_k = &QMatMulT<Q5_KFormat<D>>;
  k.matmul_q6_k = &QMatMulT<Q6_KFormat<D>>;
  k.matmul_q8_0_il = &QMatMulT<Q8_0FormatIl<D>>;
  k.matmul_q4_0_il = &QMatMulT<Q4_0FormatIl<D>>;
  k.matmul_q5_0_il = &QMatMulT<Q5_0FormatIl<D>>;
  k.matmul_q5_1_il = &QMatMulT<Q5_1FormatIl<D>>;
  k.matmul_q4_k_il = &QMatMulT<Q4_KFormatIl<D>>;
  k.matmul_q5_k_il = &QMatMulT<Q5_KFormatIl<D>>;
  k.matmul_q6_k_il = &QMatMulT<Q6_KFormatIl<D>>;
  return k;
}
