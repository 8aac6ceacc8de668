// Products of quantized weights with quantized activation rows (q8_activations.h), shared
// by every vector level. Not a normal header: simd_avx2.cc, simd_avx512.cc and
// simd_avx512_vnni.cc include it inside their anonymous namespace after defining
//   KVSERVE_SIMD_TARGET  their function attribute (at least AVX2 + FMA + F16C)
// and pass WithQuantKernels<D> a struct D with
//   static __m256i DotU8S8(__m256i acc, __m256i u, __m256i s):
//       acc[k] += sum_{j<4} u8(u[4k + j]) * s8(s[4k + j]) for the 8 int32 lanes
// (MaddubsDot below for AVX2 and AVX-512 F; vpdpbusd on AVX-512 VNNI).
// All levels use 256-bit integer vectors: a q8_0 / q4_0 block is 32 elements, a k-quant
// sub-block 32, so 32 bytes are the natural step, and on Zen 4 a 512-bit integer op
// issues as two 256-bit halves anyway (same throughput). Decode is bound by the weight
// stream, not by these instructions.
//
// Exactness: the integer part of every block product is exact (no saturation: the
// unsigned operand is < 64 or |w| <= 128 against |x| <= 127, so vpmaddubsw's pair sums stay
// below 2^15); only the per-block float scaling and the final sum round, in a different
// order than the scalar DotQ* functions.

// vpmaddubsw + vpmaddwd: 8 int32 sums of 4 adjacent u8 x s8 products.
struct MaddubsDot {
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

// Zeroes N vector accumulators and N scalar corrections.
template <int N>
KVSERVE_SIMD_TARGET inline void ZeroAccumulators(__m256 (&acc)[N], float (&corr)[N]) {
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) {
    acc[i] = _mm256_setzero_ps();
    corr[i] = 0.0f;
  }
}

// Each Row* kernel below computes out[i] = W[row] · X[i] for N activation rows at once:
// the weight block is loaded and unpacked once, then multiplied with each row's block
// (N accumulators), so batched decode does not redo the unpacking per sequence.

// q8_0 x Q8Block: per block d_w * d_x * sum w[j] x[j]. The signed x signed product runs
// as |w| (unsigned) times x with w's sign.
template <typename D, int N>
KVSERVE_SIMD_TARGET inline void RowQ8_0(const uint8_t* w, const uint8_t* xq, int64_t ldxq,
                                        int64_t cols, float* out) {
  __m256 acc[N];
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* wb = w + b * model::kQ8_0BlockBytes;
    const __m256i wq = Load256(wb + 2);
    const __m256i wabs = _mm256_sign_epi8(wq, wq);
    const float dw = LoadHalf(wb);
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const Q8Block& xb = XAt<Q8Block>(xq, ldxq, i, b);
      const __m256i dot =
          D::DotU8S8(_mm256_setzero_si256(), wabs, _mm256_sign_epi8(Load256(xb.q), wq));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * xb.d), acc[i]);
    }
  }
  for (int i = 0; i < N; ++i) out[i] = HSum8(acc[i]);
}

// q4_0 x Q8Block: per block d_w * d_x * (sum q[j] x[j] - 8 sum x[j]), q the unsigned
// nibbles (low nibbles are elements 0..15, high nibbles 16..31).
template <typename D, int N>
KVSERVE_SIMD_TARGET inline void RowQ4_0(const uint8_t* w, const uint8_t* xq, int64_t ldxq,
                                        int64_t cols, float* out) {
  const __m256i low4 = _mm256_set1_epi8(15);
  __m256 acc[N];
  float offset[N];  // sum_b d_w d_x sum x
  ZeroAccumulators(acc, offset);
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* wb = w + b * model::kQ4_0BlockBytes;
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2));
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low4);
    const float dw = LoadHalf(wb);
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const Q8Block& xb = XAt<Q8Block>(xq, ldxq, i, b);
      const __m256i dot = D::DotU8S8(_mm256_setzero_si256(), q, Load256(xb.q));
      const float d = dw * xb.d;
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d), acc[i]);
      offset[i] += d * static_cast<float>(xb.sum);
    }
  }
  for (int i = 0; i < N; ++i) out[i] = HSum8(acc[i]) - 8.0f * offset[i];
}

// q4_K x Q8KBlock: per block d_x * (d * sum_s sc_s sum q x - dmin * sum_s m_s sum x),
// sum x of a sub-block from the activation's bsums.
template <typename D, int N>
KVSERVE_SIMD_TARGET inline void RowQ4_K(const uint8_t* w, const uint8_t* xq, int64_t ldxq,
                                        int64_t cols, float* out) {
  const __m256i low4 = _mm256_set1_epi8(15);
  __m256 acc[N];
  __m256 min_acc[N];  // dmin * d_x * sum_s m_s sum x, per lane
  float unused[N];
  ZeroAccumulators(acc, unused);
  ZeroAccumulators(min_acc, unused);
  for (int64_t b = 0; b < cols / 256; ++b) {
    const uint8_t* wb = w + b * model::kQ4_KBlockBytes;
    uint8_t sc[8];
    uint8_t m[8];
    for (int s = 0; s < 8; ++s) model::Q4KScaleMin(wb + 4, s, &sc[s], &m[s]);
    const float d = LoadHalf(wb);
    const float dmin = LoadHalf(wb + 2);
    // [m0, m0, m1, m1, ..., m7, m7] as int16: vpmaddwd with the 16 bsums gives
    // m_s * (bsums[2s] + bsums[2s + 1]) in int32 lane s.
    const __m256i m16 = _mm256_setr_epi16(m[0], m[0], m[1], m[1], m[2], m[2], m[3], m[3], m[4],
                                          m[4], m[5], m[5], m[6], m[6], m[7], m[7]);
    __m256i sum[N];
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const Q8KBlock& xb = XAt<Q8KBlock>(xq, ldxq, i, b);
      const __m256i min_sums = _mm256_madd_epi16(Load256(xb.bsums), m16);
      min_acc[i] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sums), _mm256_set1_ps(dmin * xb.d), min_acc[i]);
      sum[i] = _mm256_setzero_si256();
    }
    for (int j = 0; j < 4; ++j) {
      const __m256i packed = Load256(wb + 16 + 32 * j);
      const __m256i lo = _mm256_and_si256(packed, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
      const __m256i sc_lo = _mm256_set1_epi32(sc[2 * j]);
      const __m256i sc_hi = _mm256_set1_epi32(sc[2 * j + 1]);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) {
        const int8_t* x = XAt<Q8KBlock>(xq, ldxq, i, b).q + 64 * j;
        const __m256i dlo = D::DotU8S8(_mm256_setzero_si256(), lo, Load256(x));
        const __m256i dhi = D::DotU8S8(_mm256_setzero_si256(), hi, Load256(x + 32));
        sum[i] = _mm256_add_epi32(sum[i], _mm256_mullo_epi32(dlo, sc_lo));
        sum[i] = _mm256_add_epi32(sum[i], _mm256_mullo_epi32(dhi, sc_hi));
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const float dx = d * XAt<Q8KBlock>(xq, ldxq, i, b).d;
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[i]), _mm256_set1_ps(dx), acc[i]);
    }
  }
  for (int i = 0; i < N; ++i) out[i] = HSum8(acc[i]) - HSum8(min_acc[i]);
}

// q6_K x Q8KBlock: per block d * d_x * sum_g scale_g (sum q x - 32 sum x) over the 16
// groups of 16, q the unsigned 6-bit codes (layout in model/quant.h, Q6KQuant).
template <typename D, int N>
KVSERVE_SIMD_TARGET inline void RowQ6_K(const uint8_t* w, const uint8_t* xq, int64_t ldxq,
                                        int64_t cols, float* out) {
  const __m256i low4 = _mm256_set1_epi8(15);
  const __m256i low2 = _mm256_set1_epi8(3);
  __m256 acc[N];
  __m256 offset_acc[N];  // 32 * d * d_x * sum_g scale_g sum x, per lane
  float unused[N];
  ZeroAccumulators(acc, unused);
  ZeroAccumulators(offset_acc, unused);
  for (int64_t b = 0; b < cols / 256; ++b) {
    const uint8_t* wb = w + b * model::kQ6_KBlockBytes;
    const auto* scales = reinterpret_cast<const int8_t*>(wb + 192);
    const float d = LoadHalf(wb + 208);
    // The 16 scales as int16: vpmaddwd with the 16 bsums sums scale_g * bsums[g] in pairs.
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
    __m256i sum[N];
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const Q8KBlock& xb = XAt<Q8KBlock>(xq, ldxq, i, b);
      const __m256i offset = _mm256_madd_epi16(Load256(xb.bsums), sc16);
      offset_acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(offset), _mm256_set1_ps(32.0f * d * xb.d),
                                      offset_acc[i]);
      sum[i] = _mm256_setzero_si256();
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = Load256(wb + 64 * h);       // k = 0 (low), 2 (high nibbles)
      const __m256i ql1 = Load256(wb + 64 * h + 32);  // k = 1 (low), 3 (high nibbles)
      const __m256i qh = Load256(wb + 128 + 32 * h);
      const __m256i q[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                            _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), low2);
        const __m256i code = _mm256_or_si256(q[k], _mm256_slli_epi16(high, 4));
        // Lanes 0-3 are elements 0-15 of the 32 (group 8h + 2k), lanes 4-7 the next 16.
        const int g = 8 * h + 2 * k;
        const __m256i sc =
            _mm256_setr_epi32(scales[g], scales[g], scales[g], scales[g], scales[g + 1],
                              scales[g + 1], scales[g + 1], scales[g + 1]);
#pragma GCC unroll 8
        for (int i = 0; i < N; ++i) {
          const int8_t* x = XAt<Q8KBlock>(xq, ldxq, i, b).q + 128 * h + 32 * k;
          const __m256i dot = D::DotU8S8(_mm256_setzero_si256(), code, Load256(x));
          sum[i] = _mm256_add_epi32(sum[i], _mm256_mullo_epi32(dot, sc));
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const float dx = d * XAt<Q8KBlock>(xq, ldxq, i, b).d;
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[i]), _mm256_set1_ps(dx), acc[i]);
    }
  }
  for (int i = 0; i < N; ++i) out[i] = HSum8(acc[i]) - HSum8(offset_acc[i]);
}

// KernelSet::matmul_q* (simd_kernels.h): every weight row once against the n activation
// rows, four at a time (a row of s110m is 200 to 1200 bytes, so it stays in L1 while the
// groups pass).
template <void (*kRow1)(const uint8_t*, const uint8_t*, int64_t, int64_t, float*),
          void (*kRow2)(const uint8_t*, const uint8_t*, int64_t, int64_t, float*),
          void (*kRow3)(const uint8_t*, const uint8_t*, int64_t, int64_t, float*),
          void (*kRow4)(const uint8_t*, const uint8_t*, int64_t, int64_t, float*)>
KVSERVE_SIMD_TARGET void QMatMul(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                 int64_t row_begin, int64_t row_end, const void* xq, int64_t ldxq,
                                 int n, float* y, int64_t ldy) {
  const auto* x = static_cast<const uint8_t*>(xq);
  float out[4];
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* wr = w + r * row_bytes;
    for (int i = 0; i < n; i += 4) {
      const uint8_t* xi = x + i * ldxq;
      const int nn = std::min(4, n - i);
      switch (nn) {
        case 1:
          kRow1(wr, xi, ldxq, cols, out);
          break;
        case 2:
          kRow2(wr, xi, ldxq, cols, out);
          break;
        case 3:
          kRow3(wr, xi, ldxq, cols, out);
          break;
        default:
          kRow4(wr, xi, ldxq, cols, out);
          break;
      }
      for (int k = 0; k < nn; ++k) y[(i + k) * ldy + r] = out[k];
    }
  }
}

// The quantized kernels of the including level, added to a KernelSet.
template <typename D>
constexpr KernelSet WithQuantKernels(KernelSet k) {
  k.matmul_q8_0 = &QMatMul<&RowQ8_0<D, 1>, &RowQ8_0<D, 2>, &RowQ8_0<D, 3>, &RowQ8_0<D, 4>>;
  k.matmul_q4_0 = &QMatMul<&RowQ4_0<D, 1>, &RowQ4_0<D, 2>, &RowQ4_0<D, 3>, &RowQ4_0<D, 4>>;
  k.matmul_q4_k = &QMatMul<&RowQ4_K<D, 1>, &RowQ4_K<D, 2>, &RowQ4_K<D, 3>, &RowQ4_K<D, 4>>;
  k.matmul_q6_k = &QMatMul<&RowQ6_K<D, 1>, &RowQ6_K<D, 2>, &RowQ6_K<D, 3>, &RowQ6_K<D, 4>>;
  return k;
}
