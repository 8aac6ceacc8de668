// Products of quantized weights with quantized activation rows (q8_activations.h) on the
// NEON levels. Not a normal header: simd_neon.cc, simd_neon_dotprod.cc and
// simd_neon_i8mm.cc include it inside their anonymous namespace after defining
//   KVSERVE_SIMD_TARGET  their function attribute (empty for the NEON level)
// and pass WithNeonQuantKernels<D> a struct D with
//   static int32x4_t Dot(int32x4_t acc, int8x16_t a, int8x16_t b):
//       acc plus 4 int32 lanes whose sum is sum_{j<16} a[j] * b[j]
// (SmullDot below for NEON; sdot on the dotprod level).
//
// Each weight block is decoded once into signed bytes (16 per register) and then
// multiplied with the block of up to kNeonRowGroup activation rows, so a batch does not
// repeat the unpacking per row. Each format F below provides
//   kElems, kBytes, using XBlock       elements and bytes of a weight block; the
//                                      activation block it meets
//   struct Block; static void Decode(const uint8_t* wb, Block* out)
//   template <typename D> static float32x4_t Dot(const Block&, const XBlock&, float32x4_t acc):
//       acc + 4 float lanes whose sum is W_block · x_block
//
// Exactness: the integer part of every block product is exact (smull / smlal: two byte
// products, each at most 128 * 127, sum below 2^15 in an int16 lane; sdot sums into
// int32), only the per-block float scaling and the final sum round, in a different order
// than the scalar DotQ* functions.

// smull + smlal2 + sadalp: 8 int16 sums of 2 byte products, added pairwise into int32.
struct SmullDot {
  static int32x4_t Dot(int32x4_t acc, int8x16_t a, int8x16_t b) {
    int16x8_t p = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    p = vmlal_high_s8(p, a, b);
    return vpadalq_s16(acc, p);
  }
};

// f16 -> f32 (fcvt, exact).
KVSERVE_SIMD_TARGET inline float LoadHalfNeon(const uint8_t* p) {
  __fp16 h;
  std::memcpy(&h, p, 2);
  return static_cast<float>(h);
}

// Block b of activation row i (rows ldxq bytes apart).
template <typename XBlock>
inline const XBlock& XAtNeon(const uint8_t* xq, int64_t ldxq, int i, int64_t b) {
  return reinterpret_cast<const XBlock*>(xq + i * ldxq)[b];
}

// The 32 codes of a q8_0 or q4_0 block as signed bytes, and its scale.
struct Block32 {
  int8x16_t q[2];  // elements 0..15, 16..31
  float d;
};

// q8_0 (34 bytes per 32: f16 d, int8 w) x Q8Block.
struct Q8_0Neon {
  static constexpr int64_t kElems = 32;
  static constexpr int64_t kBytes = model::kQ8_0BlockBytes;
  using XBlock = Q8Block;
  using Block = Block32;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block* out) {
    const auto* q = reinterpret_cast<const int8_t*>(wb + 2);
    out->q[0] = vld1q_s8(q);
    out->q[1] = vld1q_s8(q + 16);
    out->d = LoadHalfNeon(wb);
  }
};

// q4_0 (18 bytes per 32: f16 d, 16 bytes of nibbles; w = nibble - 8; low nibbles are
// elements 0..15, high nibbles 16..31) x Q8Block.
struct Q4_0Neon {
  static constexpr int64_t kElems = 32;
  static constexpr int64_t kBytes = model::kQ4_0BlockBytes;
  using XBlock = Q8Block;
  using Block = Block32;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block* out) {
    const uint8x16_t v = vld1q_u8(wb + 2);
    const int8x16_t eight = vdupq_n_s8(8);
    out->q[0] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), eight);
    out->q[1] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
    out->d = LoadHalfNeon(wb);
  }
};

// The 32 codes (0..31) of a q5_0 or q5_1 block whose qh[4] sit at qh, its 16 bytes of
// nibbles at qh + 4 (model::Q5Code): q[0] = elements 0..15 (low nibbles), q[1] = 16..31
// (high nibbles), each plus 16 where bit j of the little-endian 32-bit qh is set (vtst
// of qh byte j / 8, duplicated, against the byte's bit j % 8).
KVSERVE_SIMD_TARGET inline void Q5CodesNeon(const uint8_t* qh, uint8x16_t (&q)[2]) {
  const uint8x16_t v = vld1q_u8(qh + 4);
  const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201));
  const uint8x16_t sixteen = vdupq_n_u8(16);
  const uint8x16_t bytes_lo = vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1]));
  const uint8x16_t bytes_hi = vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3]));
  q[0] = vorrq_u8(vandq_u8(v, vdupq_n_u8(15)), vandq_u8(vtstq_u8(bytes_lo, bit), sixteen));
  q[1] = vorrq_u8(vshrq_n_u8(v, 4), vandq_u8(vtstq_u8(bytes_hi, bit), sixteen));
}

// q5_0 (22 bytes per 32: f16 d, qh[4], 16 bytes of nibbles; w = q - 16) x Q8Block.
struct Q5_0Neon {
  static constexpr int64_t kElems = 32;
  static constexpr int64_t kBytes = model::kQ5_0BlockBytes;
  using XBlock = Q8Block;
  using Block = Block32;
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block* out) {
    uint8x16_t q[2];
    Q5CodesNeon(wb + 2, q);
    const int8x16_t sixteen = vdupq_n_s8(16);
    out->q[0] = vsubq_s8(vreinterpretq_s8_u8(q[0]), sixteen);
    out->q[1] = vsubq_s8(vreinterpretq_s8_u8(q[1]), sixteen);
    out->d = LoadHalfNeon(wb);
  }
};

// W_block · x_block of a q8_0, q4_0 or q5_0 block: one integer dot product, one scaling.
template <typename D, typename F>
KVSERVE_SIMD_TARGET inline float32x4_t Dot32(const Block32& w, const Q8Block& x, float32x4_t acc) {
  int32x4_t dot = D::Dot(vdupq_n_s32(0), w.q[0], vld1q_s8(x.q));
  dot = D::Dot(dot, w.q[1], vld1q_s8(x.q + 16));
  return vfmaq_n_f32(acc, vcvtq_f32_s32(dot), w.d * x.d);
}

// q5_1 (24 bytes per 32: f16 d, f16 m, qh[4], 16 bytes of nibbles; w = d q + m) x
// Q8Block: d d_x (q · x) + m d_x sum x.
struct Q5_1Neon {
  static constexpr int64_t kElems = 32;
  static constexpr int64_t kBytes = model::kQ5_1BlockBytes;
  using XBlock = Q8Block;
  struct Block {
    Block32 codes;  // the unsigned codes 0..31 (as signed bytes) and d
    float m;
  };
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block* out) {
    uint8x16_t q[2];
    Q5CodesNeon(wb + 4, q);
    out->codes.q[0] = vreinterpretq_s8_u8(q[0]);
    out->codes.q[1] = vreinterpretq_s8_u8(q[1]);
    out->codes.d = LoadHalfNeon(wb);
    out->m = LoadHalfNeon(wb + 2);
  }
  template <typename D>
  KVSERVE_SIMD_TARGET static float32x4_t Dot(const Block& w, const XBlock& x, float32x4_t acc) {
    acc = Dot32<D, Q5_1Neon>(w.codes, x, acc);
    return vsetq_lane_f32(vgetq_lane_f32(acc, 0) + w.m * x.d * static_cast<float>(x.sum), acc, 0);
  }
};

// q4_K (144 bytes per 256: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes
// of nibbles) x Q8KBlock: sum_s d sc_s (q_s · x_s) - dmin m_s (sum x_s) over the eight
// 32-element sub-blocks s; sum x_s from the activations' bsums. With kFive, q5_K (176
// bytes per 256: the same head, then qh[32] and the nibbles): the same math with codes
// 0..31, whose fifth bit for element 32s + l is bit s of qh[l] (model::Q5KQuant).
template <bool kFive>
struct KMinNeon {
  static constexpr int64_t kElems = 256;
  static constexpr int64_t kBytes = kFive ? model::kQ5_KBlockBytes : model::kQ4_KBlockBytes;
  using XBlock = Q8KBlock;
  struct Block {
    int8x16_t q[16];  // sub-block s: q[2s], q[2s + 1]
    int32_t sc[8];
    int32_t m[8];
    float d;
    float dmin;
  };
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block* out) {
    // Bytes 32j..32j+31 of the nibbles: sub-block 2j in the low nibbles, 2j + 1 in the high.
    const uint8_t* qs = wb + (kFive ? 48 : 16);
    const uint8x16_t low = vdupq_n_u8(15);
    for (int j = 0; j < 4; ++j) {
      const uint8x16_t a = vld1q_u8(qs + 32 * j);
      const uint8x16_t b = vld1q_u8(qs + 32 * j + 16);
      out->q[4 * j] = vreinterpretq_s8_u8(vandq_u8(a, low));
      out->q[4 * j + 1] = vreinterpretq_s8_u8(vandq_u8(b, low));
      out->q[4 * j + 2] = vreinterpretq_s8_u8(vshrq_n_u8(a, 4));
      out->q[4 * j + 3] = vreinterpretq_s8_u8(vshrq_n_u8(b, 4));
    }
    if constexpr (kFive) {
      // q[2s + c] lane l: bit s of qh[16c + l] to bit 4 (ushl: left by 4 - s, or right).
      const uint8x16_t qh[2] = {vld1q_u8(wb + 16), vld1q_u8(wb + 32)};
      const uint8x16_t bit4 = vdupq_n_u8(16);
      for (int s = 0; s < 8; ++s) {
        for (int c = 0; c < 2; ++c) {
          const uint8x16_t fifth =
              vandq_u8(vshlq_u8(qh[c], vdupq_n_s8(static_cast<int8_t>(4 - s))), bit4);
          out->q[2 * s + c] = vorrq_s8(out->q[2 * s + c], vreinterpretq_s8_u8(fifth));
        }
      }
    }
    for (int s = 0; s < 8; ++s) {
      uint8_t sc;
      uint8_t m;
      model::Q4KScaleMin(wb + 4, s, &sc, &m);
      out->sc[s] = sc;
      out->m[s] = m;
    }
    out->d = LoadHalfNeon(wb);
    out->dmin = LoadHalfNeon(wb + 2);
  }
  template <typename D>
  KVSERVE_SIMD_TARGET static float32x4_t Dot(const Block& w, const XBlock& x, float32x4_t acc) {
    int32x4_t scaled = vdupq_n_s32(0);
    for (int s = 0; s < 8; ++s) {
      int32x4_t dot = D::Dot(vdupq_n_s32(0), w.q[2 * s], vld1q_s8(x.q + 32 * s));
      dot = D::Dot(dot, w.q[2 * s + 1], vld1q_s8(x.q + 32 * s + 16));
      scaled = vmlaq_n_s32(scaled, dot, w.sc[s]);
    }
    // Lane k of bsums_lo / _hi: sum x of sub-block k / k + 4.
    const int32x4_t sums_lo = vpaddlq_s16(vld1q_s16(x.bsums));
    const int32x4_t sums_hi = vpaddlq_s16(vld1q_s16(x.bsums + 8));
    const int32x4_t mins =
        vmlaq_s32(vmulq_s32(sums_lo, vld1q_s32(w.m)), sums_hi, vld1q_s32(w.m + 4));
    acc = vfmaq_n_f32(acc, vcvtq_f32_s32(scaled), w.d * x.d);
    return vfmaq_n_f32(acc, vcvtq_f32_s32(mins), -w.dmin * x.d);
  }
};

using Q4_KNeon = KMinNeon<false>;
using Q5_KNeon = KMinNeon<true>;

// q6_K (210 bytes per 256: 128 bytes of low nibbles ql, 64 of high bit pairs qh, 16 int8
// scales, f16 d; codes - 32) x Q8KBlock: d sum_g scale_g (q_g · x_g) over the sixteen
// 16-element groups g. The layout is model::Q6KQuant's.
struct Q6_KNeon {
  static constexpr int64_t kElems = 256;
  static constexpr int64_t kBytes = model::kQ6_KBlockBytes;
  using XBlock = Q8KBlock;
  struct Block {
    int8x16_t q[16];  // group g: elements 16g..16g+15
    int32_t scale[16];
    float d;
  };
  KVSERVE_SIMD_TARGET static void Decode(const uint8_t* wb, Block* out) {
    const uint8_t* ql = wb;
    const uint8_t* qh = wb + 128;
    const uint8x16_t low = vdupq_n_u8(15);
    const uint8x16_t bits45 = vdupq_n_u8(0x30);
    const int8x16_t offset = vdupq_n_s8(32);
    // Element 128h + 32k + 16c + l (l < 16) is in group 8h + 2k + c.
    for (int h = 0; h < 2; ++h) {
      for (int c = 0; c < 2; ++c) {
        const uint8x16_t l0 = vld1q_u8(ql + 64 * h + 16 * c);
        const uint8x16_t l1 = vld1q_u8(ql + 64 * h + 32 + 16 * c);
        const uint8x16_t hb = vld1q_u8(qh + 32 * h + 16 * c);
        const uint8x16_t codes[4] = {
            vorrq_u8(vandq_u8(l0, low), vandq_u8(vshlq_n_u8(hb, 4), bits45)),
            vorrq_u8(vandq_u8(l1, low), vandq_u8(vshlq_n_u8(hb, 2), bits45)),
            vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, bits45)),
            vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), bits45)),
        };
        for (int k = 0; k < 4; ++k) {
          out->q[8 * h + 2 * k + c] = vsubq_s8(vreinterpretq_s8_u8(codes[k]), offset);
        }
      }
    }
    const auto* scales = reinterpret_cast<const int8_t*>(wb + 192);
    for (int g = 0; g < 16; ++g) out->scale[g] = scales[g];
    out->d = LoadHalfNeon(wb + 208);
  }
  template <typename D>
  KVSERVE_SIMD_TARGET static float32x4_t Dot(const Block& w, const XBlock& x, float32x4_t acc) {
    int32x4_t total = vdupq_n_s32(0);
    for (int g = 0; g < 16; ++g) {
      const int32x4_t dot = D::Dot(vdupq_n_s32(0), w.q[g], vld1q_s8(x.q + 16 * g));
      total = vmlaq_n_s32(total, dot, w.scale[g]);
    }
    return vfmaq_n_f32(acc, vcvtq_f32_s32(total), w.d * x.d);
  }
};

// The block product of format F (Dot32 for the 32-element formats but q5_1).
template <typename D, typename F>
KVSERVE_SIMD_TARGET inline float32x4_t BlockDot(const typename F::Block& w,
                                                const typename F::XBlock& x, float32x4_t acc) {
  if constexpr (std::is_same_v<typename F::Block, Block32>) {
    return Dot32<D, F>(w, x, acc);
  } else {
    return F::template Dot<D>(w, x, acc);
  }
}

// Activation rows that share one decode of a weight block (their accumulators stay in
// registers).
constexpr int kNeonRowGroup = 4;

// KernelSet's QMatMulFn for format F: per weight row, per group of up to kNeonRowGroup
// activation rows, per block: decode once, then one block product per activation row.
template <typename D, typename F>
KVSERVE_SIMD_TARGET void QMatMulNeon(const uint8_t* w, int64_t row_bytes, int64_t cols,
                                     int64_t row_begin, int64_t row_end, const void* xq,
                                     int64_t ldxq, int n, float* y, int64_t ldy) {
  const auto* x = static_cast<const uint8_t*>(xq);
  const int64_t blocks = cols / F::kElems;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* wr = w + r * row_bytes;
    for (int i0 = 0; i0 < n; i0 += kNeonRowGroup) {
      const int rows = std::min(kNeonRowGroup, n - i0);
      float32x4_t acc[kNeonRowGroup];
      for (int k = 0; k < kNeonRowGroup; ++k) acc[k] = vdupq_n_f32(0.0f);
      for (int64_t b = 0; b < blocks; ++b) {
        typename F::Block block;
        F::Decode(wr + b * F::kBytes, &block);
        for (int k = 0; k < rows; ++k) {
          acc[k] = BlockDot<D, F>(block, XAtNeon<typename F::XBlock>(x, ldxq, i0 + k, b), acc[k]);
        }
      }
      for (int k = 0; k < rows; ++k) y[(i0 + k) * ldy + r] = vaddvq_f32(acc[k]);
    }
  }
}

// `k` with the quantized products of this level (dot products by D).
template <typename D>
constexpr KernelSet WithNeonQuantKernels(KernelSet k) {
  k.matmul_q8_0 = &QMatMulNeon<D, Q8_0Neon>;
  k.matmul_q4_0 = &QMatMulNeon<D, Q4_0Neon>;
  k.matmul_q5_0 = &QMatMulNeon<D, Q5_0Neon>;
  k.matmul_q5_1 = &QMatMulNeon<D, Q5_1Neon>;
  k.matmul_q4_k = &QMatMulNeon<D, Q4_KNeon>;
  k.matmul_q5_k = &QMatMulNeon<D, Q5_KNeon>;
  k.matmul_q6_k = &QMatMulNeon<D, Q6_KNeon>;
  return k;
}
