// Register-tiled products of quantized weights with interleaved activation rows
// (q8_activations.h, Q8x8Block / interleaved Q8KBlock) in 512-bit vectors, for the
// AVX-512 VNNI level. Not a normal header: simd_avx512_vnni.cc includes it inside its
// anonymous namespace after simd_quant_inl.h (whose decoders it reuses), with
// KVSERVE_SIMD_TARGET defined.
//
// Why: the 256-bit interleaved kernels of simd_quant_inl.h keep one weight block in
// registers and walk the activation rows one at a time, each row's float accumulator on
// the stack; per 256 multiply-adds they pay about as many loads, stores and scaling
// instructions as dot products, so the dot-product units idle most of the time. Here
// each group of kTileRows weight rows is decoded once into a panel in memory (codes,
// per-lane float scales), and a kTileRows x kTileCols tile of (weight row, activation
// row) pairs keeps its accumulators in registers over the whole row: per block every
// loaded code vector feeds several vpdpbusd, and the scaling is a few float instructions
// per pair.
//
// 512-bit view of the interleaved codes: vector m (bytes 64m .. 64m + 63) holds words 2m
// (lanes 0-7) and 2m + 1 (lanes 8-15), so lanes v and v + 8 both sum within (sub-)block
// v: over m = 0, 1 within its first 16 elements (q6_K group 2v), over m = 2, 3 its last 16
// (group 2v + 1). Every per-lane constant below therefore repeats in lanes v and v + 8,
// except the k-quants' offset weights, which hold group 2v in lane v and 2v + 1 in v + 8,
// and q5_1's, which hold block v's in lane v and 0 in v + 8.
//
// Exactness as in simd_quant_inl.h: the integer block sums are exact; scales (products of
// an f16 and a small integer, exact in f32) and the final sums round in another order.

// One decoded weight block of 256 elements.
struct alignas(64) PanelBlock {
  uint8_t q[256];      // interleaved unsigned codes (q8_0: w + 128)
  float scale[16];     // multiplier of the m = 0..3 chain (q6_K: m = 0, 1), per lane
  float scale_hi[16];  // q6_K: of the m = 2, 3 chain
  float offset[16];    // k-quants: weight of the activations' group sums (see KPrep); q5_1: -m
};

// Lanes 0-7 = lo, 8-15 = hi (AVX-512 F only: the level does not require DQ).
KVSERVE_SIMD_TARGET inline __m512 Join(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

// Lanes 0-7 and 8-15 both = v.
KVSERVE_SIMD_TARGET inline __m512 Twice(__m256 v) { return Join(v, v); }

// The activation side of one (block, activation row), shared by the tile's weight rows.
struct XPrep {
  __m512 d;      // per-lane activation scale
  __m512i init;  // start of the integer chain (q8_0 / q4_0: -offset * sum of the block)
  __m512 b;      // k-quants: lane v = d bsums[2v], lane v + 8 = d bsums[2v + 1]
};

// q8_0 and q4_0 against Q8x8Block: eight 32-weight blocks per panel block; the integer
// chain starts at -(off << kShift) sum x (q4_0: codes q - 8; q8_0 under VNNI: w + 128).
// The activation side; TileQ4_0 and TileQ8_0 below add the Decode of their format.
template <typename F, int kShift>
struct Tile32 {
  using XBlock = Q8x8Block;
  static constexpr bool kTwoChains = false;
  static constexpr bool kFloatOffset = false;
  KVSERVE_SIMD_TARGET static void Prepare(const Q8x8Block& x, XPrep* p) {
    p->d = Twice(_mm256_loadu_ps(x.d));
    const __m256i sum = _mm256_slli_epi32(Load256(x.sum), kShift);
    p->init = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), sum));
  }
  static constexpr int64_t kBytes = 8 * F::kBytes;
};

// Blocks first .. first + 3 of a q4_0 row: their 16 packed bytes, one block per 128-bit
// lane.
KVSERVE_SIMD_TARGET inline __m512i Q4_0Quad(const uint8_t* wb, int first) {
  auto packed = [&](int v) {
    return _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(wb + (first + v) * model::kQ4_0BlockBytes + 2));
  };
  __m512i q = _mm512_castsi128_si512(packed(0));
  q = _mm512_inserti32x4(q, packed(1), 1);
  q = _mm512_inserti32x4(q, packed(2), 2);
  return _mm512_inserti32x4(q, packed(3), 3);
}

// q4_0 straight into the interleaved panel. Word k < 4 of a block's packed bytes holds
// its elements 4k .. 4k + 3 in the low nibbles (panel vector k) and 16 + 4k .. 19 + 4k in
// the high ones (panel vector k + 4), so two 2-source permutes gather words k and k + 1
// of all eight blocks, and the nibble split writes two panel vectors each: about half
// the instructions of unpacking each block and transposing (DecodeEight, as the 256-bit
// interleaved kernels do).
template <typename D>
struct TileQ4_0 : Tile32<Q4_0Format<D>, 3> {
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, PanelBlock* out) {
    const __m512i lo = Q4_0Quad(wb, 0);  // dword 4v + k = word k of block v
    const __m512i hi = Q4_0Quad(wb, 4);  // of block 4 + v
    const __m512i words01 = _mm512_permutex2var_epi32(
        lo, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29), hi);
    const __m512i words23 = _mm512_permutex2var_epi32(
        lo, _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31), hi);
    const __m512i low4 = _mm512_set1_epi8(15);
    _mm512_store_si512(out->q, _mm512_and_si512(words01, low4));
    _mm512_store_si512(out->q + 64, _mm512_and_si512(words23, low4));
    _mm512_store_si512(out->q + 128, _mm512_and_si512(_mm512_srli_epi16(words01, 4), low4));
    _mm512_store_si512(out->q + 192, _mm512_and_si512(_mm512_srli_epi16(words23, 4), low4));
    _mm512_store_ps(out->scale, Twice(LoadHalves8(wb, model::kQ4_0BlockBytes)));
  }
};

// Eight q5_0 or q5_1 blocks (format F) into the interleaved panel the way the 256-bit
// interleaved kernels decode them (DecodeEight: Q5Codes per block, then the 8 x 8 word
// transpose): the codes and d; with kMin also m, returned.
template <typename F, bool kMin>
KVSERVE_SIMD_TARGET inline __m256 DecodeEightToPanel(const uint8_t* wb, PanelBlock* out) {
  Block8 b;
  DecodeEight<F, false, kMin>(wb, &b);
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->q + 32 * k), b.q[k]);
  }
  _mm512_store_ps(out->scale, Twice(b.d));
  return kMin ? b.m : _mm256_setzero_ps();
}

// q5_0: codes 0..31, the integer chain starts at -16 sum x.
template <typename D>
struct TileQ5_0 : Tile32<Q5_0Format<D>, 4> {
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, PanelBlock* out) {
    DecodeEightToPanel<Q5_0Format<D>, false>(wb, out);
  }
};

// q5_1 against Q8x8Block: the codes times d as q5_0's (no integer offset), plus block v's
// m d_x sum x as a float offset: lane v of `offset` holds -m_v and lane v of XPrep::b
// d_x sum x (lanes 8-15: 0), which MulPanel's fnmadd adds.
template <typename D>
struct TileQ5_1 {
  using XBlock = Q8x8Block;
  static constexpr bool kTwoChains = false;
  static constexpr bool kFloatOffset = true;
  static constexpr int64_t kBytes = 8 * model::kQ5_1BlockBytes;
  KVSERVE_SIMD_TARGET static void Prepare(const Q8x8Block& x, XPrep* p) {
    const __m256 d = _mm256_loadu_ps(x.d);
    p->d = Twice(d);
    p->init = _mm512_setzero_si512();
    p->b = Join(_mm256_mul_ps(d, _mm256_cvtepi32_ps(Load256(x.sum))), _mm256_setzero_ps());
  }
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, PanelBlock* out) {
    const __m256 m = DecodeEightToPanel<Q5_1Format<D>, true>(wb, out);
    _mm512_store_ps(out->offset, Join(_mm256_sub_ps(_mm256_setzero_ps(), m), _mm256_setzero_ps()));
  }
};

// Blocks v and v + 1 of a q8_0 row: their 32 codes each, block v in dwords 0-7.
KVSERVE_SIMD_TARGET inline __m512i Q8_0Pair(const uint8_t* wb, int v) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(Load256(wb + v * model::kQ8_0BlockBytes + 2)),
                            Load256(wb + (v + 1) * model::kQ8_0BlockBytes + 2), 1);
}

// q8_0 straight into the interleaved panel: the 8 x 8 transpose of the eight blocks'
// 32-bit words in two rounds of 2-source permutes (first words 0-3 and 4-7 of blocks 0-3
// and of 4-7, then words k and k + 1 of all eight), the codes as w + 128 by one xor per
// two panel vectors (DecodeEight unpacks each block and transposes in 256 bits).
template <typename D>
struct TileQ8_0 : Tile32<Q8_0Format<D>, 7> {
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, PanelBlock* out) {
    // Dword 4w + b = word w (of four) of block b (of four).
    const __m512i quads03 =
        _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
    const __m512i quads47 =
        _mm512_setr_epi32(4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31);
    const __m512i z0 = Q8_0Pair(wb, 0);
    const __m512i z1 = Q8_0Pair(wb, 2);
    const __m512i z2 = Q8_0Pair(wb, 4);
    const __m512i z3 = Q8_0Pair(wb, 6);
    const __m512i a03 = _mm512_permutex2var_epi32(z0, quads03, z1);  // words 0-3, blocks 0-3
    const __m512i a47 = _mm512_permutex2var_epi32(z0, quads47, z1);  // words 4-7, blocks 0-3
    const __m512i b03 = _mm512_permutex2var_epi32(z2, quads03, z3);  // blocks 4-7
    const __m512i b47 = _mm512_permutex2var_epi32(z2, quads47, z3);
    // Words w0, w0 + 1 (w0 = 0 or 2 of the quads) of all eight blocks: panel vectors.
    const __m512i words01 =
        _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i words23 =
        _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    const __m512i offset = _mm512_set1_epi8(-128);
    auto store = [&](int j, __m512i v) KVSERVE_SIMD_TARGET {
      _mm512_store_si512(out->q + 64 * j, _mm512_xor_si512(v, offset));
    };
    store(0, _mm512_permutex2var_epi32(a03, words01, b03));
    store(1, _mm512_permutex2var_epi32(a03, words23, b03));
    store(2, _mm512_permutex2var_epi32(a47, words01, b47));
    store(3, _mm512_permutex2var_epi32(a47, words23, b47));
    _mm512_store_ps(out->scale, Twice(LoadHalves8(wb, model::kQ8_0BlockBytes)));
  }
};

// The k-quants against interleaved Q8KBlock: the codes are unsigned, the offset
// (q4_K: dmin m_s per sub-block; q6_K: 32 d sc_g per group) meets the group sums.
struct TileK {
  using XBlock = Q8KBlock;
  static constexpr bool kFloatOffset = true;
  KVSERVE_SIMD_TARGET static void Prepare(const Q8KBlock& x, XPrep* p) {
    p->d = _mm512_set1_ps(x.d);
    p->init = _mm512_setzero_si512();
    const __m512i bs = _mm512_cvtepi16_epi32(Load256(x.bsums));
    const __m512i even_odd =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    p->b = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(even_odd, bs)), p->d);
  }
};

// q4_K straight into the interleaved panel: packed chunk j (32 bytes) holds sub-block 2j in
// its low nibbles and 2j + 1 in its high ones, word k of a chunk words k of both, so panel
// vector v (word 2v of sub-blocks 0-7 in lanes 0-7, word 2v + 1 in lanes 8-15) is one
// 2-source permute of the 128 packed bytes (each chunk's word twice), a shift of the odd
// lanes by 4 and a mask: under half the instructions of unpacking and transposing
// (Q4KCodes and Transpose8x8, as the 256-bit interleaved kernels do). With kFive, q5_K
// (the nibbles from byte 48): lane l's fifth bits are bit l % 8 of the bytes of qh dword
// 2v + l / 8 (the same four elements), one permute of qh and a rotate by 4 - l % 8 (mod 32)
// bring them to bit 4 of each byte, merged in by one ternary-logic op.
template <bool kFive>
struct TileKMin : TileK {
  static constexpr bool kTwoChains = false;
  static constexpr int64_t kBytes = kFive ? model::kQ5_KBlockBytes : model::kQ4_KBlockBytes;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, PanelBlock* out) {
    __m256i sc;
    __m256i m;
    Q4KScaleMin(wb, &sc, &m);
    constexpr int kCodes = kFive ? 48 : 16;                    // where the nibbles start
    const __m512i chunks01 = _mm512_loadu_si512(wb + kCodes);  // dword 8j + k = word k of chunk j
    const __m512i chunks23 = _mm512_loadu_si512(wb + kCodes + 64);
    const __m512i odd_high = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const __m512i low4 = _mm512_set1_epi8(15);
    const __m512i qh = kFive ? _mm512_castsi256_si512(Load256(wb + 16)) : _mm512_setzero_si512();
    const __m512i rotate = _mm512_setr_epi32(4, 3, 2, 1, 0, 31, 30, 29, 4, 3, 2, 1, 0, 31, 30, 29);
    const __m512i bit4 = _mm512_set1_epi8(0x10);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      // Lane l: word 2v + l / 8 of chunk (l % 8) / 2.
      const __m512i idx = _mm512_add_epi32(
          _mm512_setr_epi32(0, 0, 8, 8, 16, 16, 24, 24, 1, 1, 9, 9, 17, 17, 25, 25),
          _mm512_set1_epi32(2 * v));
      const __m512i words = _mm512_permutex2var_epi32(chunks01, idx, chunks23);
      __m512i q = _mm512_and_si512(_mm512_srlv_epi32(words, odd_high), low4);
      if constexpr (kFive) {
        const __m512i qh_idx =
            _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                             _mm512_set1_epi32(2 * v));
        const __m512i high = _mm512_rolv_epi32(_mm512_permutexvar_epi32(qh_idx, qh), rotate);
        q = _mm512_ternarylogic_epi32(q, high, bit4, 0xF8);  // q | (high & 0x10)
      }
      _mm512_store_si512(out->q + 64 * v, q);
    }
    _mm512_store_ps(out->scale,
                    Twice(_mm256_mul_ps(_mm256_set1_ps(LoadHalf(wb)), _mm256_cvtepi32_ps(sc))));
    // Lanes v and v + 8 meet bsums 2v and 2v + 1: both halves of sub-block v.
    _mm512_store_ps(out->offset,
                    Twice(_mm256_mul_ps(_mm256_set1_ps(LoadHalf(wb + 2)), _mm256_cvtepi32_ps(m))));
  }
};

// q6_K straight into the interleaved panel as TileKMin: sub-block v = 4h + k (Q6KCodes) takes
// word w of its low nibbles from ql half h, 32-byte part k % 2, nibble k / 2, and its
// high bit pair k from word w of qh half h; per panel vector one 2-source permute of ql,
// one permute of qh, a shift, a rotate (bit pair k to bits 4-5) and a merge.
struct TileQ6K : TileK {
  static constexpr bool kTwoChains = true;
  static constexpr int64_t kBytes = model::kQ6_KBlockBytes;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, PanelBlock* out) {
    const __m512i ql0 = _mm512_loadu_si512(wb);       // dword 8 (k % 2) + w, h = 0
    const __m512i ql1 = _mm512_loadu_si512(wb + 64);  // h = 1
    const __m512i qh = _mm512_loadu_si512(wb + 128);  // dword 8h + w
    // Per lane (sub-block v = l % 8): the nibble shift 4 (k / 2), the rotate 4 - 2k mod 32.
    const __m512i nibble = _mm512_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4);
    const __m512i rotate = _mm512_setr_epi32(4, 2, 0, 30, 4, 2, 0, 30, 4, 2, 0, 30, 4, 2, 0, 30);
    const __m512i low4 = _mm512_set1_epi8(15);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      // Lane l: word w = 2v + l / 8 of sub-block l % 8.
      const __m512i w = _mm512_set1_epi32(2 * v);
      const __m512i ql_idx = _mm512_add_epi32(
          _mm512_setr_epi32(0, 8, 0, 8, 16, 24, 16, 24, 1, 9, 1, 9, 17, 25, 17, 25), w);
      const __m512i qh_idx =
          _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 1, 1, 1, 1, 9, 9, 9, 9), w);
      const __m512i lo = _mm512_and_si512(
          _mm512_srlv_epi32(_mm512_permutex2var_epi32(ql0, ql_idx, ql1), nibble), low4);
      const __m512i hi = _mm512_rolv_epi32(_mm512_permutexvar_epi32(qh_idx, qh), rotate);
      // lo | (hi & 0x30)
      _mm512_store_si512(out->q + 64 * v, _mm512_ternarylogic_epi32(lo, hi, bits45, 0xF8));
    }
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 192));
    // Even groups' scales to bytes 0-7, odd groups' to bytes 8-15.
    const __m128i split =
        _mm_shuffle_epi8(sc8, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    const __m256 d = _mm256_set1_ps(LoadHalf(wb + 208));
    const __m256 even = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(split)));
    const __m256 odd =
        _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(split, 8))));
    _mm512_store_ps(out->scale, Twice(even));
    _mm512_store_ps(out->scale_hi, Twice(odd));
    // Codes are q = w / (d sc) + 32: group 2v in lane v, 2v + 1 in lane v + 8.
    const __m512 both = Join(even, odd);
    _mm512_store_ps(out->offset, _mm512_mul_ps(both, _mm512_set1_ps(32.0f)));
  }
};

// Weight rows x activation rows per register tile: 8 float accumulators, the two
// activation rows' codes of one block (8 vectors), 2 integer chains, a weight vector and
// the activation constants fit the 32 vector registers (BM_QuantLayout: 4 x 2 beat
// 4 x 3, 2 x 4, 8 x 2 and 8 x 1).
constexpr int kTileRows = 4;
constexpr int kTileCols = 2;

// y[c * ldy + r] = W_r . x_c for the R panel rows and C activation rows at x (ldxq bytes
// apart), `blocks` panel blocks per row.
template <typename T, int R, int C>
KVSERVE_SIMD_TARGET void MulTile(const PanelBlock* panel, int64_t blocks, const uint8_t* x,
                                 int64_t ldxq, float* y, int64_t ldy) {
  using XBlock = typename T::XBlock;
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  constexpr int kChains = T::kTwoChains ? 2 : 1;
  constexpr int kSteps = 4 / kChains;
  for (int64_t b = 0; b < blocks; ++b) {
    // The block's activation codes of the C rows stay in registers for all R weight rows.
    XPrep xp[C];
    __m512i xv[C][4];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const XBlock& xb = XAt<XBlock>(x, ldxq, c, b);
      T::Prepare(xb, &xp[c]);
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) xv[c][m] = _mm512_loadu_si512(xb.q + 64 * m);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const PanelBlock& pb = panel[r * blocks + b];
#pragma GCC unroll 2
      for (int chain = 0; chain < kChains; ++chain) {
        __m512i sum[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) sum[c] = xp[c].init;
#pragma GCC unroll 4
        for (int s = 0; s < kSteps; ++s) {
          const int m = chain * kSteps + s;
          const __m512i wv = _mm512_load_si512(pb.q + 64 * m);
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) sum[c] = _mm512_dpbusd_epi32(sum[c], wv, xv[c][m]);
        }
        const __m512 scale = _mm512_load_ps(chain == 0 ? pb.scale : pb.scale_hi);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          acc[r][c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[c]), _mm512_mul_ps(scale, xp[c].d), acc[r][c]);
        }
      }
      if constexpr (T::kFloatOffset) {
        const __m512 off = _mm512_load_ps(pb.offset);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fnmadd_ps(off, xp[c].b, acc[r][c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
  }
}

// Prefetches part `part` of `parts` equal parts of the `bytes` bytes at `next` (an
// integer: the address may lie past the weights; a hint never faults).
KVSERVE_SIMD_TARGET inline void PrefetchPart(uintptr_t next, int64_t bytes, int part, int parts) {
  const int64_t begin = bytes * part / parts / 64 * 64;
  const int64_t end = bytes * (part + 1) / parts;
  for (int64_t o = begin; o < end; o += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(next + static_cast<uintptr_t>(o)), _MM_HINT_T0);
  }
}

// All activation rows against R decoded panel rows, in tiles of kTileCols rows. Before
// each tile it prefetches an equal part of the next panel's encoded weights (`next`,
// `next_bytes`), so they stream in while the tiles compute instead of stalling the next
// decode (at batch 16 the decode is the only part of a panel that reads memory).
template <typename T, int R>
KVSERVE_SIMD_TARGET void MulPanel(const PanelBlock* panel, int64_t blocks, const uint8_t* x,
                                  int64_t ldxq, int n, float* y, int64_t ldy, uintptr_t next,
                                  int64_t next_bytes) {
  const int tiles = n / kTileCols + n % kTileCols;
  int tile = 0;
  int i = 0;
  for (; i + kTileCols <= n; i += kTileCols) {
    PrefetchPart(next, next_bytes, tile++, tiles);
    MulTile<T, R, kTileCols>(panel, blocks, x + i * ldxq, ldxq, y + i * ldy, ldy);
  }
  for (; i < n; ++i) {
    PrefetchPart(next, next_bytes, tile++, tiles);
    MulTile<T, R, 1>(panel, blocks, x + i * ldxq, ldxq, y + i * ldy, ldy);
  }
}

// KernelSet::matmul_*_il (simd_kernels.h) for tile format T: kTileRows weight rows at a
// time are decoded into a panel, then multiplied with every activation row.
template <typename T>
KVSERVE_SIMD_TARGET void TiledQMatMul(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                      int64_t row_begin, int64_t row_end, const void* xq,
                                      int64_t ldxq, int n, float* y, int64_t ldy) {
  const int64_t blocks = cols / 256;
  std::vector<PanelBlock> panel(static_cast<size_t>(kTileRows * blocks));
  const uint8_t* x = static_cast<const uint8_t*>(xq);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kTileRows, row_end - r0));
    for (int r = 0; r < rows; ++r) {
      const uint8_t* wr = w + (r0 + r) * row_bytes;
      for (int64_t b = 0; b < blocks; ++b) T::Decode(wr + b * T::kBytes, &panel[r * blocks + b]);
    }
    // The next panel's rows (none past row_end: they belong to another thread's slice).
    const int64_t next_rows = std::clamp<int64_t>(row_end - r0 - rows, 0, kTileRows);
    const uintptr_t next = reinterpret_cast<uintptr_t>(w + (r0 + rows) * row_bytes);
    const int64_t next_bytes = next_rows * row_bytes;
    if (rows == kTileRows) {
      MulPanel<T, kTileRows>(panel.data(), blocks, x, ldxq, n, y + r0, ldy, next, next_bytes);
    } else {
      for (int r = 0; r < rows; ++r) {
        MulPanel<T, 1>(panel.data() + r * blocks, blocks, x, ldxq, n, y + r0 + r, ldy, next, 0);
      }
    }
  }
}

// The tiled interleaved kernels, replacing the 256-bit ones in a KernelSet.
template <typename D>
KernelSet WithTiledQuantKernels(KernelSet k) {
  static_assert(D::kUnsignedOffset, "the tiles run q8_0 as w + 128 (vpdpbusd)");
  k.matmul_q8_0_il = &TiledQMatMul<TileQ8_0<D>>;
  k.matmul_q4_0_il = &TiledQMatMul<TileQ4_0<D>>;
  k.matmul_q5_0_il = &TiledQMatMul<TileQ5_0<D>>;
  k.matmul_q5_1_il = &TiledQMatMul<TileQ5_1<D>>;
  k.matmul_q4_k_il = &TiledQMatMul<TileKMin<false>>;
  k.matmul_q5_k_il = &TiledQMatMul<TileKMin<true>>;
  k.matmul_q6_k_il = &TiledQMatMul<TileQ6K>;
  return k;
}
