// Zmm16FloatLanes: the accumulators and tiling that the 512-bit float panel formats
// (simd_float_panels_inl.h) share, and the bf16 panel line widened to f32 (Bf16ZmmWidened).
// Not a normal header: simd_avx512.cc and simd_avx512_bf16.cc include it
// inside their anonymous namespace, with KVSERVE_SIMD_TARGET defined (AVX-512 F at least),
// before their formats.

// The 16 rows of a panel in one 512-bit accumulator (32 registers).
struct Zmm16FloatLanes {
  using Acc = __m512;
  KVSERVE_SIMD_TARGET static Acc Zero() { return _mm512_setzero_ps(); }
  KVSERVE_SIMD_TARGET static void Store(float* y, Acc acc) { _mm512_storeu_ps(y, acc); }
  // Activation rows per pass over a block: 8, in tiles of 2 panels (16 accumulators, each
  // broadcast feeding two multiply-adds): one broadcast per two multiply-adds halves the
  // load pressure of one panel per tile, and 8 rows keep the accumulators within the
  // register file, where 12 rows spilled and 16 rows in one-panel tiles loaded more
  // (bench/kernels_bench.cc BM_Gemm f32 and bf16_dot:2).
  static constexpr int kPassRows = 8;
  // Fewer rows take more panels at once, so that enough accumulators are in flight (P * M
  // of them, at most 16) and a batch-1 product streams four panels side by side.
  static constexpr int Panels(int m) { return m <= 2 ? 4 : m <= 5 ? 3 : 2; }
};

// The bf16 panel layout read for f32 multiply-adds: each line widened to its odd and even
// columns (a bf16 is the upper half of an f32: exact), float activations broadcast per
// column. Madd is the format's: which column of a pair goes first.
struct Bf16ZmmWidened : Zmm16FloatLanes {
  using Weight = uint16_t;
  using Act = float;
  static constexpr int64_t kCols = 2;
  struct Vec {
    __m512 odd;
    __m512 even;
  };
  KVSERVE_SIMD_TARGET static Vec Line(const uint16_t* at) {
    const __m512i v = _mm512_loadu_si512(at);
    return Vec{_mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(~0xFFFF))),
               _mm512_castsi512_ps(_mm512_slli_epi32(v, 16))};
  }
  KVSERVE_SIMD_TARGET static Vec Broadcast(const float* at) {
    return Vec{_mm512_set1_ps(at[1]), _mm512_set1_ps(at[0])};
  }
};
