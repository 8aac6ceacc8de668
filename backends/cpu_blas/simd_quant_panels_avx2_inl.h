// KernelSet::matmul_q4_0_panels, ..., matmul_q6_k_panels of the AVX2, AVX-VNNI and AVX-512 F
// levels: the 16-row panel layouts of model/panels.h (the same packed bytes the AVX-512 VNNI
// kernels read) in two 256-bit halves. The integer products are the level's u8 x s8 dot
// product D (simd_quant_inl.h) through YmmChain<D> below: vpmaddubsw + vpmaddwd (MaddubsDot,
// avx2 and avx512) or one vpdpbusd (avx_vnni); everything else is shared. Not a normal
// header: simd_avx2.cc, simd_avx_vnni.cc and simd_avx512.cc include it inside their anonymous
// namespace, after simd_quant_inl.h, with KVSERVE_SIMD_TARGET defined, and call
// WithYmmQuantPanelKernels<D>.
//
// Why: the row-major AVX2 kernels decode and sum each row's blocks on their own (about 15
// instructions per 18-byte q4_0 block, then horizontal sums), which keeps batch-1 decode of
// the 4-bit files at about half the bandwidth bound on AVX2 machines (docs/performance.md,
// "AVX2: Zen 3"). A panel line holds 4 columns of 16 rows, so one vpmaddubsw (vpdpbusd)
// multiplies 8 rows' 4 codes by one broadcast activation word, the lanes are the rows (no
// horizontal sums), a q4_0 line's nibbles are unpacked once for every activation row, and per 32
// columns one f16 scale vector serves all rows.
//
// Exactness, and equality with the VNNI kernels: every block's integer sum is exact, and
// the float steps per (row, activation row, block) are those of simd_quant_panels_inl.h's
// Block32 (the scale product, one multiply-add into the accumulator), so the results are
// bit for bit those of the AVX-512 VNNI panel kernels, at every level that includes this
// file. q4_0 with vpmaddubsw: codes 0..15 against |x| <= 127 give pair sums <= 3,810, and
// the 8 operands of a block add up to <= 30,480 in int16 before one vpmaddwd widens them;
// q8_0 with vpmaddubsw: |w| (<= 128) and x with w's sign (vpsignb) stays <= 32,512 per pair,
// widened per operand. With vpdpbusd every product goes straight into int32 (q8_0 as
// w + 128, less 128 sum x, as simd_quant_inl.h's offset form).

// The integer chains, from the level's D (simd_quant_inl.h: DotU8S8, and kUnsignedOffset,
// true where DotU8S8 is vpdpbusd and sums into int32 without an int16 step; such a D also has
// DotS16, vpdpwssd). A chain
// collects the u8 x s8 products of a few operands: as int16 pair sums with vpmaddubsw
// (within the int16 bounds stated per format; vpmaddwd widens them once per chain), in
// int32 lanes with vpdpbusd (no widening; the k-quants' sub-block scales then multiply the
// chain with vpmulld instead of inside vpmaddwd).
template <typename D>
struct YmmChain {
  static constexpr bool kInt32 = D::kUnsignedOffset;
  // A chain that Sum(chain, base) finishes with the int32 lanes `base` added.
  KVSERVE_SIMD_TARGET static __m256i Start(__m256i base) {
    return kInt32 ? base : _mm256_setzero_si256();
  }
  // chain + u8(u) x s8(s), 4 adjacent bytes per int32 lane.
  KVSERVE_SIMD_TARGET static __m256i Dot(__m256i chain, __m256i u, __m256i s) {
    if constexpr (kInt32) return D::DotU8S8(chain, u, s);
    return InOrder(_mm256_add_epi16(chain, _mm256_maddubs_epi16(u, s)));
  }
  // The int32 lane sums of a chain started with Start(base), base included.
  KVSERVE_SIMD_TARGET static __m256i Sum(__m256i chain, __m256i base) {
    if constexpr (kInt32) return chain;
    return _mm256_add_epi32(base, _mm256_madd_epi16(chain, _mm256_set1_epi16(1)));
  }
  // The AddScaled operand of per-lane scales v (|v| < 2^15) given as (v, v) in the two
  // int16 halves of each lane: the int32 lanes v with vpdpbusd, else `pair` itself.
  KVSERVE_SIMD_TARGET static __m256i ScaleOfPair(__m256i pair) {
    return kInt32 ? _mm256_srai_epi32(pair, 16) : pair;
  }
  // sum + the products of the int16 pairs of a and b, 2 per int32 lane: vpmaddwd + vpaddd,
  // or D::DotS16 (vpdpwssd) where D has vpdpbusd (the k-quants' offset terms).
  KVSERVE_SIMD_TARGET static __m256i DotS16(__m256i sum, __m256i a, __m256i b) {
    if constexpr (kInt32) return D::DotS16(sum, a, b);
    return InOrder(_mm256_add_epi32(sum, _mm256_madd_epi16(a, b)));
  }
  // sum + the int32 lane sums of a chain started with Start(0), times the scales.
  KVSERVE_SIMD_TARGET static __m256i AddScaled(__m256i sum, __m256i chain, __m256i scale) {
    if constexpr (kInt32) return _mm256_add_epi32(sum, _mm256_mullo_epi32(chain, scale));
    return InOrder(_mm256_add_epi32(sum, _mm256_madd_epi16(chain, scale)));
  }
};

// The 16 rows of a panel in two 256-bit accumulators (rows 0-7, 8-15).
// (Also the accumulator of simd_avx2.cc's float panel formats, F32LinesYmm and
// Bf16ExactLinesYmm.)
struct Ymm16Rows {
  struct Acc {
    __m256 half[2];
  };
  KVSERVE_SIMD_TARGET static Acc Zero() { return Acc{{_mm256_setzero_ps(), _mm256_setzero_ps()}}; }
  KVSERVE_SIMD_TARGET static void Store(float* y, const Acc& a) {
    _mm256_storeu_ps(y, a.half[0]);
    _mm256_storeu_ps(y + 8, a.half[1]);
  }
};

// The quantized formats' lane traits: Ymm16Rows and their tiling.
struct Ymm16Lanes : Ymm16Rows {
  // Activation rows per pass: each row takes 2 float accumulators and 2 integer sums, so 3
  // rows and the operands fill the 16 registers.
  static constexpr int kMaxRows = 3;
  static constexpr int Panels(int m) { return m == 1 ? 2 : 1; }
};

// Broadcast of 4-byte word k of `p` (activation codes).
KVSERVE_SIMD_TARGET inline __m256i WordAt256(const void* p, int k) {
  int32_t word;
  std::memcpy(&word, static_cast<const uint8_t*>(p) + 4 * k, 4);
  return _mm256_set1_epi32(word);
}

// acc[m].half[h] += float(sum[m][h]) * (the rows' f16 scales . d of activation row m),
// as Block32 (simd_quant_panels_inl.h) computes it.
template <int M>
KVSERVE_SIMD_TARGET inline void AddBlock32(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                           int64_t b, __m256i (*sum)[2], Ymm16Lanes::Acc* acc) {
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + 16 * h)));
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(XAt<Q8Block>(x, ldxq, m, b).d));
      acc[m].half[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[m][h]), d, acc[m].half[h]);
    }
  }
}

// What the two 32-element formats share: one f16 scale per row and block.
struct Ymm16Block32 : Ymm16Lanes {
  static constexpr int64_t kElems = 32;
  // 8 blocks (2.3 KiB of q4_0) ahead: the 256-bit kernels spend longer on a block than the
  // 512-bit ones, and at batch 1 their streams need more bytes in flight to keep memory
  // busy (Zen 5, avx2 level: tl1b q4_0 decode +5 % over 4 blocks; q8_0 unchanged).
  static constexpr int64_t kPrefetchBlocks = 8;
  static constexpr int64_t kPrefetchBlocksL2 = kPrefetchBlocks;
  static constexpr bool kMultiPanel = true;
};

// q4_0: element = d * (code - 8); line j (columns 4j.. in the low nibbles, 16 + 4j.. in
// the high ones) at pb + 32 + 64 j.
template <typename D>
struct Q4_0PanelYmm : Ymm16Block32 {
  using C = YmmChain<D>;
  static constexpr int64_t kBlockBytes = model::kQ4_0PanelBlockBytes;
  template <int M>
  KVSERVE_SIMD_TARGET static void Accumulate(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                             int64_t b, Acc* acc) {
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256i offset[M];
    __m256i chain[M][2];  // the 8 operands' products
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      offset[m] = _mm256_set1_epi32(-8 * XAt<Q8Block>(x, ldxq, m, b).sum);
      chain[m][0] = chain[m][1] = C::Start(offset[m]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i packed = Load256(pb + 32 + 64 * j + 32 * h);
        const __m256i lo = _mm256_and_si256(packed, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) {
          const Q8Block& xb = XAt<Q8Block>(x, ldxq, m, b);
          chain[m][h] = C::Dot(chain[m][h], lo, WordAt256(xb.q, j));
          chain[m][h] = C::Dot(chain[m][h], hi, WordAt256(xb.q, 4 + j));
        }
      }
    }
    __m256i sum[M][2];
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      for (int h = 0; h < 2; ++h) sum[m][h] = C::Sum(chain[m][h], offset[m]);
    }
    AddBlock32<M>(pb, x, ldxq, b, sum, acc);
  }
};

// q8_0: element = d * code (signed); line j (columns 4j ..) at pb + 32 + 64 j. The codes
// as simd_quant_inl.h's Q8_0Format takes them: w + 128 with vpdpbusd (the sums start at
// -128 sum x), else |w| against x with w's sign.
template <typename D>
struct Q8_0PanelYmm : Ymm16Block32 {
  static constexpr int64_t kBlockBytes = model::kQ8_0PanelBlockBytes;
  template <int M>
  KVSERVE_SIMD_TARGET static void Accumulate(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                             int64_t b, Acc* acc) {
    __m256i sum[M][2];
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      sum[m][0] = sum[m][1] = D::kUnsignedOffset
                                  ? _mm256_set1_epi32(-128 * XAt<Q8Block>(x, ldxq, m, b).sum)
                                  : _mm256_setzero_si256();
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i w = Load256(pb + 32 + 64 * j + 32 * h);
        const __m256i u =
            D::kUnsignedOffset ? _mm256_xor_si256(w, _mm256_set1_epi8(-128)) : _mm256_abs_epi8(w);
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) {
          const __m256i xw = WordAt256(XAt<Q8Block>(x, ldxq, m, b).q, j);
          sum[m][h] =
              InOrder(D::DotU8S8(sum[m][h], u, D::kUnsignedOffset ? xw : _mm256_sign_epi8(xw, w)));
        }
      }
    }
    AddBlock32<M>(pb, x, ldxq, b, sum, acc);
  }
};

// The k-quants (the formats of simd_quant_panels_inl.h's KQuantPanel, the same bytes):
// each 8-row half of a panel is handled whole, integer sums then float steps, before the
// other, so that 3 activation rows' sums and chains and both halves' accumulators fit the
// 16 registers. The sub-block scale multiplies the int16 chain in the vpmaddwd that widens
// it (no vpmulld: 2 uops and 10 cycles' latency on Intel's AVX2 cores). Integer sums are
// exact, equal to the VNNI kernels' (q4_K: 8 vpmaddubsw of codes <= 15 and |x| <= 128 stay
// within 30,720 in int16; q6_K: codes <= 63, 2 vpmaddubsw per int16 chain, within 32,256),
// and the float steps are theirs: the results are bit for bit those of the VNNI kernels.
// With vpdpbusd (YmmChain) the chains are int32 and take vpmulld, as the VNNI kernels'.
//
// With 1 or 2 activation rows a format may take both halves together (kHalvesTogether,
// AccumulateBoth<M>): each activation word is then broadcast once for the two halves'
// products instead of once per half. Per half and activation row the products, sums and
// float steps are the same, in the same order. q4_K at batch 1 on Zen 5 at the avx2 level:
// 1.25x in kernels_bench, and GCC's code no longer spills the broadcasts to the stack;
// q6_K gained nothing (the unpacking of its codes dominates) and keeps the halves apart.
//
// F: the format, with AccumulateHalf<M>(pb, x, ldxq, b, h, acc) for rows 8h .. 8h + 7,
// and kHalvesTogether (if true, AccumulateBoth<M> for M <= 2: rows 0 .. 15).
template <typename F>
struct Ymm16KQuant : Ymm16Lanes {
  static constexpr int64_t kElems = 256;
  static constexpr bool kMultiPanel = false;  // as KQuantPanel
  static constexpr int64_t kPrefetchBlocks = 2;
  static constexpr int64_t kPrefetchBlocksL2 = 0;  // as KQuantPanel's

  template <int M>
  KVSERVE_SIMD_TARGET static void Accumulate(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                             int64_t b, Acc* acc) {
    if constexpr (M <= 2 && F::kHalvesTogether) {
      F::template AccumulateBoth<M>(pb, x, ldxq, b, acc);
    } else {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) F::template AccumulateHalf<M>(pb, Unshared(x), ldxq, b, h, acc);
    }
  }

  // acc[m].half[h] += float(sum[m]) * scale * d of activation row m's block b, m < M
  // (KQuantPanel::AddScaled, one half).
  template <int M>
  KVSERVE_SIMD_TARGET static void AddScaled(const __m256i* sum, __m256 scale, const uint8_t* x,
                                            int64_t ldxq, int64_t b, int h, Acc* acc) {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      const __m256 dx = _mm256_set1_ps(XAt<Q8KBlock>(x, ldxq, m, b).d);
      acc[m].half[h] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[m]), _mm256_mul_ps(scale, dx), acc[m].half[h]);
    }
  }
  // The vpshufb operand that copies byte a of each int32 lane into the low byte of its int16
  // half 0 and byte b into that of half 1, zeroing their high bytes (b < 0: half 1 zero).
  KVSERVE_SIMD_TARGET static __m256i BytesToHalves(int a, int b) {
    const char z = -128;
    auto at = [&](int lane, int byte) { return byte < 0 ? z : static_cast<char>(4 * lane + byte); };
    return _mm256_setr_epi8(at(0, a), z, at(0, b), z, at(1, a), z, at(1, b), z,  //
                            at(2, a), z, at(2, b), z, at(3, a), z, at(3, b), z,  //
                            at(0, a), z, at(0, b), z, at(1, a), z, at(1, b), z,  //
                            at(2, a), z, at(2, b), z, at(3, a), z, at(3, b), z);
  }
  // The vpshufb operand that copies byte `byte` of each int32 lane into the high byte of
  // both its int16 halves and zeroes their low bytes.
  KVSERVE_SIMD_TARGET static __m256i ByteToHigh16(int byte) {
    const char z = -128;
    const char a = static_cast<char>(byte), b = static_cast<char>(4 + byte),
               c = static_cast<char>(8 + byte), e = static_cast<char>(12 + byte);
    return _mm256_setr_epi8(z, a, z, a, z, b, z, b, z, c, z, c, z, e, z, e,  //
                            z, a, z, a, z, b, z, b, z, c, z, c, z, e, z, e);
  }
};

// q4_K: element = d * sc * code - dmin * m per sub-block of 32 (codes 0..15). (No unpacked
// form: its nibbles cost one or two operations per line to unpack, and reading twice the
// bytes from L2 instead gained nothing in kernels_bench at avx2 on Zen 5, 2026-12-07.)
template <typename D>
struct Q4_KPanelYmm : Ymm16KQuant<Q4_KPanelYmm<D>> {
  using Base = Ymm16KQuant<Q4_KPanelYmm<D>>;
  using Acc = typename Base::Acc;
  using C = YmmChain<D>;
  static constexpr int64_t kBlockBytes = model::kQ4_KPanelBlockBytes;
  // Code line c (columns 4c .. 4c + 3 of sub-block c / 8), rows 8h .. 8h + 7: after the 4
  // header lines ((d, dmin), scales, mins, low bits of 4-7), sub-blocks 2t and 2t + 1 share
  // lines 4 + 8t .. 11 + 8t (low and high nibbles).
  KVSERVE_SIMD_TARGET static __m256i Codes(const uint8_t* pb, int c, int h) {
    const int s = c / 8;
    const __m256i packed = Load256(pb + 64 * (4 + 8 * (s / 2) + c % 8) + 32 * h);
    return _mm256_and_si256(s % 2 == 0 ? packed : _mm256_srli_epi16(packed, 4),
                            _mm256_set1_epi8(15));
  }
  // Rows 8h .. 8h + 7 of the panel block for h in [h0, h0 + NH): NH = 2 for M <= 2 (each
  // activation word broadcast once for both halves), else 1.
  template <int M, int NH>
  KVSERVE_SIMD_TARGET static void AccumulateHalves(const uint8_t* pb, const uint8_t* x,
                                                   int64_t ldxq, int64_t b, int h0, Acc* acc) {
    // Line 0: (d, dmin) of each row as two f16 in 4 bytes; per 128-bit lane the d's
    // gathered in the low 8 bytes and the dmin's in the high ones, then the lanes'
    // d halves joined.
    auto d_dmin = [&](int h) KVSERVE_SIMD_TARGET {
      const __m256i split = _mm256_shuffle_epi8(
          Load256(pb + 32 * h),
          _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9,
                           12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
      return _mm256_permute4x64_epi64(split, _MM_SHUFFLE(3, 1, 2, 0));
    };
    // The 6-bit scales (mins) of each row of half h as ggml's get_scale_min_k4, placed by
    // one vpshufb per line: `line` the offset of the half's scales 0-3 (mins 0-3) line, with the
    // high bits of 4-7; its line at pb + 192 holds the low 4 bits of 4-7 (scales in the low
    // nibbles, mins in the high ones). Sub-blocks a and b (of 0-3, or of 4-7) go to the two
    // int16 halves of each int32 lane (b < 0: zero).
    auto six_bits = [&](int line, int h, int nibble, int a, int b) KVSERVE_SIMD_TARGET {
      const bool high = a >= 4;
      const __m256i ctrl = Base::BytesToHalves(high ? a - 4 : a, b < 0 ? -1 : high ? b - 4 : b);
      const __m256i lo = _mm256_shuffle_epi8(Load256(pb + line + 32 * h), ctrl);
      if (!high) return _mm256_and_si256(lo, _mm256_set1_epi16(63));
      const __m256i both = _mm256_shuffle_epi8(Load256(pb + 192 + 32 * h), ctrl);
      return _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi16(both, nibble), _mm256_set1_epi16(15)),
          _mm256_and_si256(_mm256_srli_epi16(lo, 2), _mm256_set1_epi16(0x30)));
    };
    // dmin * sum_s m_s * (bsums[2s] + bsums[2s + 1]): the pair sums B_s (|B_s| <= 4,096)
    // of each activation row once per block, then sub-blocks 2t and 2t + 1 in one
    // vpmaddwd (int16 halves (m_2t, m_2t+1) against (B_2t, B_2t+1)). Integer sums: the
    // same values as per sub-block.
    alignas(16) int16_t pair_sums[M][8];
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      const int16_t* bsums = XAt<Q8KBlock>(x, ldxq, m, b).bsums;
      _mm_store_si128(reinterpret_cast<__m128i*>(pair_sums[m]),
                      _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums)),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums + 8))));
    }
    __m256i sum[M][NH];
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
#pragma GCC unroll 2
      for (int hh = 0; hh < NH; ++hh) sum[m][hh] = _mm256_setzero_si256();
    }
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
#pragma GCC unroll 2
      for (int hh = 0; hh < NH; ++hh) {
        const __m256i mins = six_bits(128, h0 + hh, 4, 2 * t, 2 * t + 1);
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) {
          sum[m][hh] = C::DotS16(sum[m][hh], mins, WordAt256(pair_sums[m], t));
        }
      }
    }
#pragma GCC unroll 2
    for (int hh = 0; hh < NH; ++hh) {
      const __m256 dmin = _mm256_cvtph_ps(_mm256_extracti128_si256(d_dmin(h0 + hh), 1));
      __m256i half_sum[M];
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) half_sum[m] = sum[m][hh];
      Base::template AddScaled<M>(half_sum, _mm256_sub_ps(_mm256_setzero_ps(), dmin), x, ldxq, b,
                                  h0 + hh, acc);
    }
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
#pragma GCC unroll 2
      for (int hh = 0; hh < NH; ++hh) sum[m][hh] = _mm256_setzero_si256();
    }
    // d * sum_s sc_s * sum_j code_j x_j.
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      __m256i chain[M][NH];
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) {
#pragma GCC unroll 2
        for (int hh = 0; hh < NH; ++hh) chain[m][hh] = C::Start(_mm256_setzero_si256());
      }
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) {
          const __m256i xw = WordAt256(XAt<Q8KBlock>(x, ldxq, m, b).q, 8 * s + k);
#pragma GCC unroll 2
          for (int hh = 0; hh < NH; ++hh) {
            chain[m][hh] = C::Dot(chain[m][hh], Codes(pb, 8 * s + k, h0 + hh), xw);
          }
        }
      }
#pragma GCC unroll 2
      for (int hh = 0; hh < NH; ++hh) {
        const int h = h0 + hh;
        // As C::AddScaled takes it: (sc, sc) in the int16 halves, or sc in the int32 lane
        // (vpdpbusd).
        const __m256i sc = six_bits(64, h, 0, s, C::kInt32 ? -1 : s);
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) sum[m][hh] = C::AddScaled(sum[m][hh], chain[m][hh], sc);
      }
    }
#pragma GCC unroll 2
    for (int hh = 0; hh < NH; ++hh) {
      const __m256 d = _mm256_cvtph_ps(_mm256_castsi256_si128(d_dmin(h0 + hh)));
      __m256i half_sum[M];
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) half_sum[m] = sum[m][hh];
      Base::template AddScaled<M>(half_sum, d, x, ldxq, b, h0 + hh, acc);
    }
  }
  template <int M>
  KVSERVE_SIMD_TARGET static void AccumulateHalf(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                                 int64_t b, int h, Acc* acc) {
    AccumulateHalves<M, 1>(pb, x, ldxq, b, h, acc);
  }
  template <int M>
  KVSERVE_SIMD_TARGET static void AccumulateBoth(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                                 int64_t b, Acc* acc) {
    AccumulateHalves<M, 2>(pb, x, ldxq, b, 0, acc);
  }
  static constexpr bool kHalvesTogether = true;
};

// q6_K: element = d * sc * (code - 32) per group of 16 (codes 0..63, int8 scales).
// kUnpacked: the codes one byte each.
//
// Unpacked codes (MatMulQuantPanelsUnpacked, simd_quant_panel_driver_inl.h): with
// many activation rows each panel block is read by every pass of kMaxRows rows, and
// unpacking its codes (4 low bits and 2 high bits from two lines) again in each pass took
// a large part of the time. The format with kUnpacked = true reads a block whose codes are
// one byte each (UnpackBlock writes it from a packed block, once per slab; the parts of
// both: Q6_KPanelParts, simd_kernels.h; rows 0-7 of a line in its first 32 bytes). Same codes,
// same products, same order: the results are bit for bit those of the packed kernels.
// kernels_bench at avx2 on Zen 5 (2026-12-07), q6_K against 512 rows 1.37x, 128 rows
// 1.31x, 32 rows 1.17x, 16 rows 1.03x.
template <typename D, bool kUnpacked = false>
struct Q6_KPanelYmm : Ymm16KQuant<Q6_KPanelYmm<D, kUnpacked>>, Q6_KPanelParts {
  using Base = Ymm16KQuant<Q6_KPanelYmm<D, kUnpacked>>;
  using Acc = typename Base::Acc;
  using C = YmmChain<D>;
  using Unpacked = Q6_KPanelYmm<D, true>;
  // Lines per chain: int16 chains hold 2 (codes <= 63), int32 ones the group's 4.
  static constexpr int kChainLines = C::kInt32 ? 4 : 2;
  static constexpr int64_t kBlockBytes =
      kUnpacked ? kUnpackedQ6_KBlockBytes : model::kQ6_KPanelBlockBytes;
  // Activation rows from which MatMulQuantPanelsUnpacked unpacks: 4 passes and more (at
  // 16 rows, 6 passes, the gain is 3 %).
  static constexpr int kUnpackMinRows = 3 * Base::kMaxRows + 1;
  // Code line c (columns 4c .. 4c + 3), rows 8h .. 8h + 7: in the 128-column half c / 32,
  // its low 4 bits in the low (k < 2) or high nibbles of line 16 half + 8 (k % 2) + w,
  // its high 2 bits in bits 2k, 2k + 1 of line 32 + 8 half + w (k = c % 32 / 8, w = c % 8;
  // panels.h).
  KVSERVE_SIMD_TARGET static __m256i Codes(const uint8_t* pb, int c, int h) {
    if constexpr (kUnpacked) return Load256(pb + kHeaderBytes + 64 * c + 32 * h);
    const int half = c / 32, k = c % 32 / 8, w = c % 8;
    const __m256i ql = Load256(pb + kHeaderBytes + 64 * (16 * half + 8 * (k % 2) + w) + 32 * h);
    const __m256i qh = Load256(pb + kHeaderBytes + 64 * (32 + 8 * half + w) + 32 * h);
    const __m256i lo = k < 2 ? ql : _mm256_srli_epi16(ql, 4);
    const __m256i hi = k == 0   ? _mm256_slli_epi16(qh, 4)
                       : k == 1 ? _mm256_slli_epi16(qh, 2)
                       : k == 2 ? qh
                                : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi8(15)),
                           _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
  }
  // Writes the unpacked block of packed block pb to out (Unpacked::kBlockBytes): the
  // header, the 64 code lines from Codes, the scale lines.
  KVSERVE_SIMD_TARGET static void UnpackBlock(const uint8_t* pb, uint8_t* out) {
    std::memcpy(out, pb, kHeaderBytes);
    uint8_t* codes = out + kHeaderBytes;
#pragma GCC unroll 8
    for (int c = 0; c < 64; ++c) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 64 * c + 32 * h), Codes(pb, c, h));
      }
    }
    std::memcpy(codes + kUnpackedCodeBytes, pb + kHeaderBytes + kPackedCodeBytes, kTrailerBytes);
  }
  // Rows 8h .. 8h + 7 of the panel block.
  template <int M>
  KVSERVE_SIMD_TARGET static void AccumulateHalf(const uint8_t* pb, const uint8_t* x, int64_t ldxq,
                                                 int64_t b, int h, Acc* acc) {
    const __m256 d =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + 16 * h)));
    // Scale line t (0-3), rows 8h .. 8h + 7.
    auto scale_line = [&](int t) KVSERVE_SIMD_TARGET {
      return Load256(pb + kBlockBytes - kTrailerBytes + 64 * t + 32 * h);
    };
    // -32 * sum_g sc_g * bsums[g]: scale line t sign-extended in int16 halves pairs groups
    // (4t, 4t + 1) and (4t + 2, 4t + 3) (panels.h), as bsums words 2t and 2t + 1 do.
    __m256i sum[M];
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) sum[m] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m256i scales = scale_line(t);
      const __m256i first = _mm256_srai_epi16(_mm256_slli_epi16(scales, 8), 8);
      const __m256i second = _mm256_srai_epi16(scales, 8);
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) {
        const int16_t* bsums = XAt<Q8KBlock>(x, ldxq, m, b).bsums;
        sum[m] = C::DotS16(sum[m], first, WordAt256(bsums, 2 * t));
        sum[m] = C::DotS16(sum[m], second, WordAt256(bsums, 2 * t + 1));
      }
    }
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      sum[m] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum[m], 5));
    }
    // + sum_g sc_g * sum_j code_j x_j, columns and groups as Q6_KPanel's; the chains span
    // kChainLines lines.
#pragma GCC unroll 8
    for (int hk = 0; hk < 8; ++hk) {
      const int half = hk / 4;  // the 128-column half of the block
      const int k = hk % 4;
#pragma GCC unroll 2
      for (int g2 = 0; g2 < 2; ++g2) {
        // Group g = 4t + u sits in byte {0, 2, 1, 3}[u] of scale line t: its scale in
        // the high byte of both int16 halves, shifted down with its sign.
        const int g = 8 * half + 2 * k + g2;
        const int byte = (g % 4 == 1) ? 2 : (g % 4 == 2) ? 1 : g % 4;
        const __m256i sc = C::ScaleOfPair(
            _mm256_srai_epi16(_mm256_shuffle_epi8(scale_line(g / 4), Base::ByteToHigh16(byte)), 8));
        __m256i chain[M];
#pragma GCC unroll 2
        for (int part = 0; part < 4 / kChainLines; ++part) {
#pragma GCC unroll 4
          for (int m = 0; m < M; ++m) chain[m] = C::Start(_mm256_setzero_si256());
#pragma GCC unroll 4
          for (int w = 4 * g2 + kChainLines * part; w < 4 * g2 + kChainLines * (part + 1); ++w) {
            const __m256i code = Codes(pb, 32 * half + 8 * k + w, h);
#pragma GCC unroll 4
            for (int m = 0; m < M; ++m) {
              chain[m] = C::Dot(chain[m], code,
                                WordAt256(XAt<Q8KBlock>(x, ldxq, m, b).q, 32 * half + 8 * k + w));
            }
          }
#pragma GCC unroll 4
          for (int m = 0; m < M; ++m) sum[m] = C::AddScaled(sum[m], chain[m], sc);
        }
      }
    }
    Base::template AddScaled<M>(sum, d, x, ldxq, b, h, acc);
  }
  // Both halves at once bought nothing here (the codes' unpacking, not the activation
  // broadcasts, dominates; kernels_bench at avx2, 2026-12-06).
  static constexpr bool kHalvesTogether = false;
};

#include "backends/cpu_blas/simd_quant_panel_driver_inl.h"  // NOLINT(build/include)

// The 256-bit panel kernels with the integer products of D.
template <typename D>
constexpr KernelSet WithYmmQuantPanelKernels(KernelSet k) {
  k.matmul_q4_0_panels = &MatMulQuantPanels<Q4_0PanelYmm<D>>;
  k.matmul_q8_0_panels = &MatMulQuantPanels<Q8_0PanelYmm<D>>;
  k.matmul_q4_k_panels = &MatMulQuantPanels<Q4_KPanelYmm<D>>;
  k.matmul_q6_k_panels = &MatMulQuantPanels<Q6_KPanelYmm<D>>;
  k.matmul_q6_k_panels_unpacked = &MatMulQuantPanelsUnpacked<Q6_KPanelYmm<D>>;
  return k;
}
