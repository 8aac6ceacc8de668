// Every vector level against the scalar kernels, on shapes that exercise the register
// blocking (4-row and 2-row blocks, 1..4 activation rows) and the scalar tails.
#include "backends/cpu_blas/simd_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu_blas/bf16_products.h"
#include "backends/cpu_blas/q8_activations.h"
#include "gtest/gtest.h"
#include "model/dtype.h"
#include "model/panels.h"
#include "model/quant.h"

namespace kvserve::backends::cpu_blas {
namespace {

using model::DType;

std::vector<float> RandomFloats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Output elements a kernel must not write start as this.
constexpr float kSentinel = 12345.0f;

// Weights stored as `dtype` bits, and the same values as floats.
struct Weights {
  std::vector<float> f32;      // [rows, cols] values exactly representable in `dtype`
  std::vector<uint16_t> bits;  // [rows, cols] f16/bf16 bits (empty for f32)
};

Weights RandomWeights(std::mt19937& rng, DType dtype, size_t n) {
  Weights w;
  w.f32 = RandomFloats(rng, n);
  if (dtype == DType::kF32) return w;
  w.bits.resize(n);
  for (size_t i = 0; i < n; ++i) {
    w.bits[i] = dtype == DType::kF16 ? model::FloatToHalf(w.f32[i]) : model::FloatToBF16(w.f32[i]);
    w.f32[i] = dtype == DType::kF16 ? model::HalfToFloat(w.bits[i]) : model::BF16ToFloat(w.bits[i]);
  }
  return w;
}

void CallMatMul(const KernelSet& k, DType dtype, const Weights& w, int64_t cols, int64_t r0,
                int64_t r1, const float* x, int64_t ldx, int n, float* y, int64_t ldy) {
  switch (dtype) {
    case DType::kF32:
      k.matmul_f32(w.f32.data(), cols, r0, r1, x, ldx, n, y, ldy);
      break;
    case DType::kF16:
      k.matmul_f16(w.bits.data(), cols, r0, r1, x, ldx, n, y, ldy);
      break;
    case DType::kBF16:
      k.matmul_bf16(w.bits.data(), cols, r0, r1, x, ldx, n, y, ldy);
      break;
    default:
      FAIL() << "quantized types: see QuantizedMatMul below";
  }
}

// Recursive float summation of n terms errs by at most about n * 2^-24 * sum|terms|; two
// different orders therefore differ by at most twice that.
float SumTolerance(int64_t n_terms, double abs_sum) {
  return static_cast<float>(2.0 * static_cast<double>(n_terms + 1) * 0x1.0p-24 * abs_sum) + 1e-30f;
}

// The n rows of `cols` activations x, quantized for products with `dtype` weights
// (Q8RowBytes(dtype, cols) bytes per row).
std::vector<uint8_t> QuantizeRows(DType dtype, const std::vector<float>& x, int n, int64_t cols) {
  const size_t row = Q8RowBytes(dtype, cols);
  std::vector<uint8_t> xq(static_cast<size_t>(n) * row);
  for (int i = 0; i < n; ++i)
    QuantizeActivations(dtype, x.data() + i * cols, cols, xq.data() + i * row);
  return xq;
}

// y against y_ref on rows [r0, r1) of each of the n output rows (ldy apart), within
// SumTolerance(cols, abs_sum(i, r)), and nothing written outside those rows (kSentinel).
template <typename AbsSum>
void ExpectSliceNear(const std::vector<float>& y, const std::vector<float>& y_ref, int n,
                     int64_t ldy, int64_t r0, int64_t r1, int64_t cols, const AbsSum& abs_sum) {
  for (int i = 0; i < n; ++i) {
    for (int64_t r = 0; r < ldy; ++r) {
      const size_t at = static_cast<size_t>(i * ldy + r);
      if (r < r0 || r >= r1) {
        EXPECT_EQ(y[at], kSentinel) << "wrote outside rows, i=" << i << " r=" << r;
        continue;
      }
      EXPECT_NEAR(y[at], y_ref[at], SumTolerance(cols, abs_sum(i, r))) << "i=" << i << " r=" << r;
    }
  }
}

// The ExpectSliceNear bound of the exact product: sum_c |W[r, c] x[i, c]| (w.f32 [rows,
// cols], x [n, ldx]).
auto ExactAbsSum(const Weights& w, const std::vector<float>& x, int64_t cols, int64_t ldx) {
  return [&w, &x, cols, ldx](int i, int64_t r) {
    double abs_sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) abs_sum += std::fabs(w.f32[r * cols + c] * x[i * ldx + c]);
    return abs_sum;
  };
}

// The levels of the architecture this test is built for (the others are not compiled).
#if defined(__aarch64__)
constexpr Isa kLevels[] = {Isa::kScalar, Isa::kNeon, Isa::kNeonDotprod, Isa::kNeonI8mm};
#else
constexpr Isa kLevels[] = {Isa::kScalar, Isa::kAvx2,       Isa::kAvxVnni,
                           Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16};
#endif

// Whether `level` is an x86-64 level at or above `min` (the kernels some tables have only
// there).
bool X86AtLeast(Isa level, Isa min) { return level >= min && level <= Isa::kAvx512Bf16; }

class SimdKernelsTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!IsaSupported(GetParam())) {
      GTEST_SKIP() << "this CPU has no " << IsaName(GetParam());
    }
  }
  const KernelSet& kernels() const { return KernelsFor(GetParam()); }
};

TEST_P(SimdKernelsTest, ReportsItsLevel) { EXPECT_EQ(kernels().isa, GetParam()); }

TEST_P(SimdKernelsTest, MatMulMatchesScalarForEveryDtypeAndShape) {
  std::mt19937 rng(42);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    // Shapes cover every path of MatMul (simd_kernels_inl.h): n = 1; 2..8 rows streamed
    // (groups 4 + 4 and 4 + 3 included); 9+ rows blocked in column chunks of 512 (1030 =
    // two chunks and a tail that is no multiple of the lanes) and row tiles of 32 (37, 70),
    // groups of 6 + 6 + 5 (17); odd row counts leave a single-row block, and 7 rows (8
    // from row 1) blocks of 4 + 2 + 1 where the level blocks 4 weight rows (AVX-512).
    for (int64_t cols : {1, 7, 8, 15, 16, 17, 33, 64, 100, 768, 1030}) {
      for (int64_t rows : {1, 3, 4, 5, 8, 9, 13, 37, 70}) {
        for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 13, 17}) {
          SCOPED_TRACE(::testing::Message() << model::DTypeName(dtype) << " cols=" << cols
                                            << " rows=" << rows << " n=" << n);
          const Weights w = RandomWeights(rng, dtype, static_cast<size_t>(rows * cols));
          const int64_t ldx = cols + 3;  // strided activation rows
          const int64_t ldy = rows + 2;  // strided output rows: the gaps must stay untouched
          const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(n * ldx));
          // A sub-range of rows, to check that the kernels honour row_begin/row_end.
          const int64_t r0 = rows > 2 ? 1 : 0;
          const int64_t r1 = rows;
          std::vector<float> y(static_cast<size_t>(n * ldy), kSentinel);
          std::vector<float> y_ref(y.size(), kSentinel);
          CallMatMul(kernels(), dtype, w, cols, r0, r1, x.data(), ldx, n, y.data(), ldy);
          CallMatMul(ScalarKernels(), dtype, w, cols, r0, r1, x.data(), ldx, n, y_ref.data(), ldy);
          ExpectSliceNear(y, y_ref, n, ldy, r0, r1, cols, ExactAbsSum(w, x, cols, ldx));
        }
      }
    }
  }
}

// Checks y ([n, ldy], rows [r0, rows) written, the rest kSentinel) against W (w.f32,
// [rows, cols]) times the activations x ([n, ldx]) rounded to bf16, up to summation order,
// and within 2^-8 sum |w x| of the product with x itself.
void ExpectBf16Products(const std::vector<float>& y, int64_t ldy, int64_t r0, int64_t rows, int n,
                        const Weights& w, int64_t cols, const std::vector<float>& x, int64_t ldx) {
  for (int i = 0; i < n; ++i) {
    for (int64_t r = 0; r < ldy; ++r) {
      const float got = y[static_cast<size_t>(i * ldy + r)];
      if (r < r0 || r >= rows) {
        ASSERT_EQ(got, kSentinel) << "wrote outside rows, i=" << i << " r=" << r;
        continue;
      }
      double rounded = 0.0;
      double exact = 0.0;
      double abs_sum = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double wc = w.f32[r * cols + c];
        const float xc = x[i * ldx + c];
        rounded += wc * model::BF16ToFloat(model::FloatToBF16(xc));
        exact += wc * xc;
        abs_sum += std::fabs(wc * xc);
      }
      const float tol = SumTolerance(cols, abs_sum);
      ASSERT_NEAR(got, rounded, tol) << "i=" << i << " r=" << r;
      ASSERT_NEAR(got, exact, 0x1.0p-8 * abs_sum + tol) << "i=" << i << " r=" << r;
    }
  }
}

// matmul_bf16_dot (avx512bf16 only): the exact product of the bf16 weights with the
// activations rounded to bf16 (to nearest even, as model::FloatToBF16), up to summation
// order; and within 2^-8 sum |w x| of the product with the unrounded activations.
TEST_P(SimdKernelsTest, Bf16DotIsTheProductWithActivationsRoundedToBf16) {
  if (GetParam() != Isa::kAvx512Bf16) {
    EXPECT_EQ(kernels().matmul_bf16_dot, nullptr);
    EXPECT_EQ(kernels().round_bf16, nullptr);
    return;
  }
  ASSERT_NE(kernels().matmul_bf16_dot, nullptr);
  ASSERT_NE(kernels().round_bf16, nullptr);
  std::mt19937 rng(11);
  // Shapes: tails below one 32-element step (1, 7, 31, 33, 1030), tiles of 6 weight rows
  // (row ranges of 1-4, 6, 8 and 13 rows) and 4 activation rows with remainders, more
  // than one 64-row pass (70).
  for (int64_t cols : {1, 7, 31, 32, 33, 64, 100, 768, 1030}) {
    for (int64_t rows : {1, 3, 4, 5, 7, 9, 14}) {
      for (int n : {1, 2, 3, 4, 5, 8, 17, 70}) {
        SCOPED_TRACE(::testing::Message() << "cols=" << cols << " rows=" << rows << " n=" << n);
        const Weights w = RandomWeights(rng, DType::kBF16, static_cast<size_t>(rows * cols));
        const int64_t ldx = cols + 3;
        const int64_t ldy = rows + 2;
        const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(n * ldx));
        const int64_t r0 = rows > 2 ? 1 : 0;
        std::vector<float> y(static_cast<size_t>(n * ldy), kSentinel);
        // Rounded rows with a stride past the padding, whose slack holds garbage the
        // kernel must not read.
        const int64_t ldxb = Bf16DotStride(cols) + 32;
        std::vector<uint16_t> xb(static_cast<size_t>(n * ldxb), 0x7fc0);  // NaN
        for (int i = 0; i < n; ++i) {
          kernels().round_bf16(x.data() + i * ldx, cols, xb.data() + i * ldxb);
          for (int64_t c = 0; c < ldxb; ++c) {
            const uint16_t want = c < cols ? model::FloatToBF16(x[static_cast<size_t>(i * ldx + c)])
                                  : c < Bf16DotStride(cols) ? uint16_t{0}
                                                            : uint16_t{0x7fc0};
            ASSERT_EQ(xb[static_cast<size_t>(i * ldxb + c)], want) << "i=" << i << " c=" << c;
          }
        }
        kernels().matmul_bf16_dot(w.bits.data(), cols, r0, rows, xb.data(), ldxb, n, y.data(), ldy);
        ExpectBf16Products(y, ldy, r0, rows, n, w, cols, x, ldx);
      }
    }
  }
}

// matmul_bf16_panels (avx512bf16 only): the weights in the panel layout (packed by
// model::PackBf16Panels), the same products as matmul_bf16_dot on the row-major weights, up to
// summation order; only the slice of panels asked for is written.
TEST_P(SimdKernelsTest, Bf16PanelsAreTheBf16DotProduct) {
  if (GetParam() != Isa::kAvx512Bf16) {
    EXPECT_EQ(kernels().matmul_bf16_panels, nullptr);
    return;
  }
  ASSERT_NE(kernels().matmul_bf16_panels, nullptr);
  std::mt19937 rng(12);
  // Shapes: one and several panels (tiles of 4, 3, 2 and 1 panels; 7 panels: a tile of
  // 4, a pair, a last single one), odd pairs of columns, every activation-row tile (1-8)
  // and more than one 8-row pass (9-17, 33, 70), a slice that starts at the second panel,
  // and panel blocks (the kernels' kFloatPanelBlockBytes: 1030 columns x 160 rows is more
  // than one block of 256 KiB; a panel of 8200 columns alone is larger than a block).
  for (int64_t cols : {2, 6, 30, 32, 34, 768, 1030, 8200}) {
    for (int64_t rows : {16, 32, 48, 80, 128, 160}) {
      for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 33, 70}) {
        if (rows == 160 && cols != 1030) continue;
        if ((cols == 8200) != (rows == 80)) continue;
        SCOPED_TRACE(::testing::Message() << "cols=" << cols << " rows=" << rows << " n=" << n);
        const Weights w = RandomWeights(rng, DType::kBF16, static_cast<size_t>(rows * cols));
        std::vector<uint16_t> packed(static_cast<size_t>(rows * cols));
        model::PackBf16Panels(w.bits.data(), cols, 0, rows / model::kPanelRows, packed.data());
        const int64_t ldx = cols + 3;
        const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(n * ldx));
        const int64_t ldxb = Bf16DotStride(cols) + 32;
        std::vector<uint16_t> xb(static_cast<size_t>(n * ldxb), 0x7fc0);  // NaN past cols
        for (int i = 0; i < n; ++i) {
          kernels().round_bf16(x.data() + i * ldx, cols, xb.data() + i * ldxb);
        }
        const int64_t ldy = rows + 5;
        const int64_t r0 = rows > model::kPanelRows ? model::kPanelRows : 0;
        std::vector<float> y(static_cast<size_t>(n * ldy), kSentinel);
        kernels().matmul_bf16_panels(packed.data(), cols, r0, rows, xb.data(), ldxb, n, y.data(),
                                     ldy);
        ExpectBf16Products(y, ldy, r0, rows, n, w, cols, x, ldx);
      }
    }
  }
}

// vdpbf16ps as Intel's manual defines it, one lane: acc += w_odd x_odd, then
// acc += w_even x_even, each an f32 FMA rounded to nearest even, denormal inputs read as
// zero, denormal results flushed to zero.
float Dpbf16Step(float acc, float w_odd, float x_odd, float w_even, float x_even) {
  auto daz = [](float v) { return std::fpclassify(v) == FP_SUBNORMAL ? 0.0f : v; };
  auto ftz = [](float v) {
    return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
  };
  acc = ftz(std::fma(daz(w_odd), daz(x_odd), daz(acc)));
  return ftz(std::fma(daz(w_even), daz(x_even), daz(acc)));
}

// matmul_bf16_panels_fma (avx512bf16 only): every output is the chain of Dpbf16Step over
// the column pairs in order, bit for bit (a few weights are bf16 denormals, which
// vdpbf16ps reads as zero); and where this CPU's vdpbf16ps follows that definition
// (ProbeBf16PanelKernels().same_bits), the bits of matmul_bf16_panels too.
TEST_P(SimdKernelsTest, Bf16PanelsFmaComputeVdpbf16ps) {
  if (GetParam() != Isa::kAvx512Bf16) {
    EXPECT_EQ(kernels().matmul_bf16_panels_fma, nullptr);
    return;
  }
  ASSERT_NE(kernels().matmul_bf16_panels_fma, nullptr);
  const bool same_bits = ProbeBf16PanelKernels().same_bits;
  std::printf("this CPU's vdpbf16ps %s Intel's definition\n",
              same_bits ? "follows" : "does not follow");
  std::mt19937 rng(15);
  for (int64_t cols : {2, 30, 768, 1030}) {
    for (int64_t rows : {16, 48, 128}) {
      for (int n : {1, 2, 5, 8, 9, 17}) {
        SCOPED_TRACE(::testing::Message() << "cols=" << cols << " rows=" << rows << " n=" << n);
        Weights w = RandomWeights(rng, DType::kBF16, static_cast<size_t>(rows * cols));
        for (size_t i = 7; i < w.bits.size(); i += 61) {  // bf16 denormals
          w.bits[i] = static_cast<uint16_t>((w.bits[i] & 0x8000) | (1 + i % 127));
          w.f32[i] = model::BF16ToFloat(w.bits[i]);
        }
        std::vector<uint16_t> packed(static_cast<size_t>(rows * cols));
        model::PackBf16Panels(w.bits.data(), cols, 0, rows / model::kPanelRows, packed.data());
        const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(n * cols));
        const int64_t ldxb = Bf16DotStride(cols) + 32;
        std::vector<uint16_t> xb(static_cast<size_t>(n * ldxb), 0);
        std::vector<float> xf(static_cast<size_t>(n * ldxb), 0.0f);
        for (int i = 0; i < n; ++i) {
          kernels().round_bf16(x.data() + i * cols, cols, xb.data() + i * ldxb);
          kernels().bf16_to_f32(xb.data() + i * ldxb, xf.data() + i * ldxb, cols);
        }
        const int64_t ldy = rows + 5;
        std::vector<float> y(static_cast<size_t>(n * ldy), kSentinel);
        kernels().matmul_bf16_panels_fma(packed.data(), cols, 0, rows, xf.data(), ldxb, n, y.data(),
                                         ldy);
        for (int i = 0; i < n; ++i) {
          for (int64_t r = 0; r < rows; ++r) {
            float want = 0.0f;
            for (int64_t c = 0; c < cols; c += 2) {
              const float* wr = w.f32.data() + r * cols;
              const float* xr = xf.data() + i * ldxb;
              want = Dpbf16Step(want, wr[c + 1], xr[c + 1], wr[c], xr[c]);
            }
            const float got = y[static_cast<size_t>(i * ldy + r)];
            ASSERT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
                << "i=" << i << " r=" << r << ": " << got << " != " << want;
          }
        }
        if (same_bits) {
          std::vector<float> y_dot(y.size(), kSentinel);
          kernels().matmul_bf16_panels(packed.data(), cols, 0, rows, xb.data(), ldxb, n,
                                       y_dot.data(), ldy);
          ASSERT_EQ(std::memcmp(y.data(), y_dot.data(), y.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

// Where the rounding mode shows: bf16 denormal weights against large activations (read as
// zero: 0, where an f32 FMA without DAZ would give about 1e-10 per pair) and products
// below the smallest normal float (flushed: 0, where an FMA without FTZ keeps a denormal).
TEST_P(SimdKernelsTest, Bf16PanelsFmaReadDenormalsAsZeroAndFlushThem) {
  if (GetParam() != Isa::kAvx512Bf16) return;
  constexpr int64_t kCols = 32;
  constexpr int64_t kRows = model::kPanelRows;
  std::vector<uint16_t> w(kRows * kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      // Even rows: denormals (1 .. 127 of the smallest); odd rows: 2^-126, the smallest normal.
      w[r * kCols + c] = r % 2 == 0 ? static_cast<uint16_t>(1 + (r * kCols + c) % 127) : 0x0080;
    }
  }
  std::vector<uint16_t> packed(w.size());
  model::PackBf16Panels(w.data(), kCols, 0, 1, packed.data());
  for (float x_value : {0x1p100f, 0x1p-10f}) {
    SCOPED_TRACE(::testing::Message() << "x=" << x_value);
    const std::vector<float> x(kCols, x_value);  // both bf16 values
    std::vector<float> y(kRows, kSentinel);
    kernels().matmul_bf16_panels_fma(packed.data(), kCols, 0, kRows, x.data(), kCols, 1, y.data(),
                                     kRows);
    for (int64_t r = 0; r < kRows; ++r) {
      // Even rows: denormal weights read as zero; odd rows: 2^-126 x 2^100 = 2^-26 each,
      // 2^-126 x 2^-10 below the normals, flushed.
      const float want = r % 2 == 1 && x_value > 1 ? kCols * 0x1p-26f : 0.0f;
      EXPECT_EQ(y[static_cast<size_t>(r)], want) << "r=" << r;
    }
  }
}

// The probe's choice: never kAuto, the FMA kernel only where it gave the same bits and
// was faster by the margin, and the same answer on every call.
TEST(Bf16ProductsTest, ProbeChoosesOnlyAnEqualAndFasterKernel) {
  const Bf16PanelProbe& probe = ProbeBf16PanelKernels();
  std::printf("%s\n", probe.reason.c_str());
  EXPECT_NE(probe.best, Bf16PanelKernel::kAuto);
  EXPECT_EQ(probe.available, IsaSupported(Isa::kAvx512Bf16));
  if (probe.best == Bf16PanelKernel::kFma) {
    EXPECT_TRUE(probe.same_bits);
    EXPECT_LT(probe.fma_us, kBf16FmaMaxTimeShare * probe.dpbf16_us);
  }
  EXPECT_EQ(&ProbeBf16PanelKernels(), &probe);
  EXPECT_EQ(ResolveBf16PanelKernel(KernelsFor(Isa::kScalar), Bf16PanelKernel::kFma),
            Bf16PanelKernel::kDpbf16);
  if (probe.available) {
    const KernelSet& k = KernelsFor(Isa::kAvx512Bf16);
    EXPECT_EQ(ResolveBf16PanelKernel(k, Bf16PanelKernel::kAuto), probe.best);
    EXPECT_EQ(ResolveBf16PanelKernel(k, Bf16PanelKernel::kFma), Bf16PanelKernel::kFma);
    EXPECT_EQ(ResolveBf16PanelKernel(k, Bf16PanelKernel::kDpbf16), Bf16PanelKernel::kDpbf16);
  }
  for (Bf16PanelKernel k :
       {Bf16PanelKernel::kAuto, Bf16PanelKernel::kDpbf16, Bf16PanelKernel::kFma}) {
    EXPECT_EQ(ParseBf16PanelKernel(Bf16PanelKernelName(k)), k);
  }
  EXPECT_EQ(ParseBf16PanelKernel("avx"), std::nullopt);
}

// matmul_f32_panels (avx2 and up): the weights in the panel layout (packed by
// model::PackF32Panels), the products of the scalar matmul_f32 on the row-major weights up
// to summation order; only the slice of panels asked for is written; and each output is
// bit for bit the same whatever the number of activation rows (one chain per output).
TEST_P(SimdKernelsTest, F32PanelsAreTheF32Product) {
  if (!X86AtLeast(GetParam(), Isa::kAvx2)) {
    EXPECT_EQ(kernels().matmul_f32_panels, nullptr);
    return;
  }
  ASSERT_NE(kernels().matmul_f32_panels, nullptr);
  std::mt19937 rng(14);
  // Shapes: one and several panels (tiles of 4, 3 and 2 panels and a last single one; 7
  // panels: a tile of 4, a pair, a last single one), every activation-row tile (1-8) and
  // more than one pass (of 6 rows at avx2, 8 at avx512: 7, 9, 16, 17, 33), a slice that
  // starts at the second panel, and
  // panel blocks (the kernels' kFloatPanelBlockBytes: 1030 columns x 80 rows is more than
  // one block of 256 KiB; a panel of 4100 columns alone is larger than a block).
  for (int64_t cols : {1, 3, 16, 17, 100, 1030, 4100}) {
    for (int64_t rows : {16, 32, 48, 80, 128}) {
      for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33}) {
        if ((cols == 4100) != (rows == 80)) continue;
        SCOPED_TRACE(::testing::Message() << "cols=" << cols << " rows=" << rows << " n=" << n);
        const Weights w = RandomWeights(rng, DType::kF32, static_cast<size_t>(rows * cols));
        std::vector<float> packed(static_cast<size_t>(rows * cols));
        model::PackF32Panels(w.f32.data(), cols, 0, rows / model::kPanelRows, packed.data());
        const int64_t ldx = cols + 3;
        const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(n * ldx));
        const int64_t ldy = rows + 5;
        const int64_t r0 = rows > model::kPanelRows ? model::kPanelRows : 0;
        std::vector<float> y(static_cast<size_t>(n * ldy), kSentinel);
        std::vector<float> y_ref(y.size(), kSentinel);
        kernels().matmul_f32_panels(packed.data(), cols, r0, rows, x.data(), ldx, n, y.data(), ldy);
        ScalarKernels().matmul_f32(w.f32.data(), cols, r0, rows, x.data(), ldx, n, y_ref.data(),
                                   ldy);
        ExpectSliceNear(y, y_ref, n, ldy, r0, rows, cols, ExactAbsSum(w, x, cols, ldx));
        // Row i alone gives the same bits.
        for (int i = 0; i < n; i += 4) {
          std::vector<float> one(static_cast<size_t>(ldy), kSentinel);
          kernels().matmul_f32_panels(packed.data(), cols, r0, rows, x.data() + i * ldx, ldx, 1,
                                      one.data(), ldy);
          for (int64_t r = r0; r < rows; ++r) {
            ASSERT_EQ(one[r], y[i * ldy + r]) << "i=" << i << " r=" << r;
          }
        }
      }
    }
  }
}

// matmul_f32_panels gives the same bits at every level that has it (one chain of FMAs per
// output in column order, whatever the vector width): this level against every other one of
// this CPU.
TEST_P(SimdKernelsTest, F32PanelsAreTheSameBitsAtEveryLevel) {
  if (!X86AtLeast(GetParam(), Isa::kAvx2)) {
    EXPECT_EQ(kernels().matmul_f32_panels, nullptr);
    return;
  }
  ASSERT_NE(kernels().matmul_f32_panels, nullptr);
  std::mt19937 rng(16);
  for (int n : {1, 2, 3, 5, 9, 17}) {
    const int64_t cols = 1030, rows = 80;
    const Weights w = RandomWeights(rng, DType::kF32, static_cast<size_t>(rows * cols));
    std::vector<float> packed(static_cast<size_t>(rows * cols));
    model::PackF32Panels(w.f32.data(), cols, 0, rows / model::kPanelRows, packed.data());
    const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(n * cols));
    std::vector<float> y(static_cast<size_t>(n * rows)), y_other(y.size());
    kernels().matmul_f32_panels(packed.data(), cols, 0, rows, x.data(), cols, n, y.data(), rows);
    for (const Isa other : kLevels) {
      if (other == GetParam() || !X86AtLeast(other, Isa::kAvx2) || !IsaSupported(other)) continue;
      SCOPED_TRACE(::testing::Message() << "n=" << n << " against " << IsaName(other));
      KernelsFor(other).matmul_f32_panels(packed.data(), cols, 0, rows, x.data(), cols, n,
                                          y_other.data(), rows);
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], y_other[i]) << "at " << i;
    }
  }
}

// matmul_bf16_panels_exact (avx2 and up): the weights in the bf16 panel layout (packed by
// model::PackBf16Panels) against float activations give bit for bit what matmul_f32_panels
// gives on the same weights widened to f32 (a few of them bf16 denormals, which must not
// read as zero) in the f32 panel layout, slice and sentinels included; and the exact
// product of the scalar matmul_bf16 up to summation order.
TEST_P(SimdKernelsTest, Bf16PanelsExactAreTheF32PanelsOfTheWidenedWeights) {
  if (!X86AtLeast(GetParam(), Isa::kAvx2)) {
    EXPECT_EQ(kernels().matmul_bf16_panels_exact, nullptr);
    return;
  }
  ASSERT_NE(kernels().matmul_bf16_panels_exact, nullptr);
  std::mt19937 rng(15);
  // Shapes as F32PanelsAreTheF32Product's, with even columns: every activation-row tile
  // (1-8) and several passes, a slice from the second panel, blocks.
  for (int64_t cols : {2, 16, 18, 100, 1030, 4100}) {
    for (int64_t rows : {16, 32, 48, 80, 128}) {
      for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17}) {
        if ((cols == 4100) != (rows == 80)) continue;
        SCOPED_TRACE(::testing::Message() << "cols=" << cols << " rows=" << rows << " n=" << n);
        Weights w = RandomWeights(rng, DType::kBF16, static_cast<size_t>(rows * cols));
        for (size_t i = 5; i < w.bits.size(); i += 37) {  // bf16 denormals, both signs
          w.bits[i] = static_cast<uint16_t>((i & 0x8000) | 0x0001 | (i & 0x7E));
          w.f32[i] = model::BF16ToFloat(w.bits[i]);
        }
        std::vector<uint16_t> packed(static_cast<size_t>(rows * cols));
        model::PackBf16Panels(w.bits.data(), cols, 0, rows / model::kPanelRows, packed.data());
        std::vector<float> packed_f32(static_cast<size_t>(rows * cols));
        model::PackF32Panels(w.f32.data(), cols, 0, rows / model::kPanelRows, packed_f32.data());
        const int64_t ldx = cols + 3;
        const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(n * ldx));
        const int64_t ldy = rows + 5;
        const int64_t r0 = rows > model::kPanelRows ? model::kPanelRows : 0;
        std::vector<float> y(static_cast<size_t>(n * ldy), kSentinel);
        std::vector<float> y_f32(y.size(), kSentinel);
        std::vector<float> y_ref(y.size(), kSentinel);
        kernels().matmul_bf16_panels_exact(packed.data(), cols, r0, rows, x.data(), ldx, n,
                                           y.data(), ldy);
        kernels().matmul_f32_panels(packed_f32.data(), cols, r0, rows, x.data(), ldx, n,
                                    y_f32.data(), ldy);
        for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], y_f32[i]) << "at " << i;
        ScalarKernels().matmul_bf16(w.bits.data(), cols, r0, rows, x.data(), ldx, n, y_ref.data(),
                                    ldy);
        ExpectSliceNear(y, y_ref, n, ldy, r0, rows, cols, ExactAbsSum(w, x, cols, ldx));
      }
    }
  }
}

QMatMulFn QuantKernel(const KernelSet& k, DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return k.matmul_q8_0;
    case DType::kQ4_0:
      return k.matmul_q4_0;
    case DType::kQ5_0:
      return k.matmul_q5_0;
    case DType::kQ5_1:
      return k.matmul_q5_1;
    case DType::kQ4_K:
      return k.matmul_q4_k;
    case DType::kQ5_K:
      return k.matmul_q5_k;
    default:
      return k.matmul_q6_k;
  }
}

// The kernel for interleaved activations (nullptr where the level has none).
QMatMulFn InterleavedKernel(const KernelSet& k, DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return k.matmul_q8_0_il;
    case DType::kQ4_0:
      return k.matmul_q4_0_il;
    case DType::kQ5_0:
      return k.matmul_q5_0_il;
    case DType::kQ5_1:
      return k.matmul_q5_1_il;
    case DType::kQ4_K:
      return k.matmul_q4_k_il;
    case DType::kQ5_K:
      return k.matmul_q5_k_il;
    default:
      return k.matmul_q6_k_il;
  }
}

// The kernel for weights in panels (from avx2; nullptr below).
QMatMulFn PanelKernel(const KernelSet& k, DType dtype) {
  switch (dtype) {
    case DType::kQ4_0:
      return k.matmul_q4_0_panels;
    case DType::kQ8_0:
      return k.matmul_q8_0_panels;
    case DType::kQ4_K:
      return k.matmul_q4_k_panels;
    default:
      return k.matmul_q6_k_panels;
  }
}

// Sets row-major row `row` (row_bytes bytes of `dtype` blocks) to the codes and scales of
// largest magnitude the format holds: q8_0 codes -128 (w + 128 = 0); q4_K codes 15 with
// every 6-bit scale and min 63; q6_K codes 0 (-32) with scales -128.
void SetExtremeRow(DType dtype, uint8_t* row, size_t row_bytes) {
  const size_t block = model::DTypeBytes(dtype, model::DTypeBlockElems(dtype));
  for (size_t b = 0; b < row_bytes / block; ++b) {
    uint8_t* wb = row + b * block;
    switch (dtype) {
      case DType::kQ8_0:
        std::memset(wb + 2, 0x80, 32);
        break;
      case DType::kQ4_K:
        std::memset(wb + 4, 0xff, 12 + 128);  // scales, mins and codes
        break;
      case DType::kQ6_K:
        std::memset(wb, 0, 192);          // ql, qh
        std::memset(wb + 192, 0x80, 16);  // scales
        break;
      default:
        break;
    }
  }
}

// matmul_q4_0_panels, ..., matmul_q6_k_panels (from avx2): weights packed by
// model::PackQuantPanels, the same products as the scalar row kernels on the row-major
// blocks up to summation order; only the slice of panels asked for is written. Every level
// gives bit for bit the results of the avx2 kernels (vpmaddubsw), and the 256-bit ones
// (avx2, avx_vnni, avx512) those of the avx512vnni ones, where this CPU has both.
TEST_P(SimdKernelsTest, QuantPanelsAreTheQuantizedProduct) {
  std::vector<DType> kTypes;
  for (DType dtype : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    if (X86AtLeast(GetParam(), Isa::kAvx2)) {
      kTypes.push_back(dtype);
    } else {
      EXPECT_EQ(PanelKernel(kernels(), dtype), nullptr) << model::DTypeName(dtype);
    }
  }
  const bool vnni_too = !X86AtLeast(GetParam(), Isa::kAvx512Vnni) && IsaSupported(Isa::kAvx512Vnni);
  const bool avx2_too = GetParam() != Isa::kAvx2 && X86AtLeast(GetParam(), Isa::kAvx2);
  std::mt19937 rng(13);
  // Shapes: one and several panels (tiles of 4, 2 and 1 panels; 7 panels: a tile of 4, a
  // pair, a last single one), every activation-row tile (1-8) and more than one 8-row pass
  // (9-17, 33), a slice that starts at the second panel, and slabs (5632 columns x 160 rows
  // is more than one slab of 256 KiB). The last row holds the format's extreme codes and
  // scales (SetExtremeRow) against activations at -127.
  for (DType dtype : kTypes) {
    const QMatMulFn panels = PanelKernel(kernels(), dtype);
    const QMatMulFn scalar = QuantKernel(ScalarKernels(), dtype);
    ASSERT_NE(panels, nullptr);
    const bool k_quant = model::DTypeBlockElems(dtype) == 256;
    for (int64_t cols : {32, 256, 288, 768, 5632}) {
      if (cols % model::DTypeBlockElems(dtype) != 0) continue;
      for (int64_t rows : {16, 32, 48, 80, 128, 160}) {
        if ((rows == 160) != (cols == 5632)) continue;
        if (rows == 128 && cols != 256) continue;
        // The weights once per shape (the k-quant encoder is slow), against every n.
        const size_t row_bytes = model::DTypeBytes(dtype, static_cast<size_t>(cols));
        std::vector<uint8_t> w(static_cast<size_t>(rows) * row_bytes);
        std::vector<float> wf(static_cast<size_t>(rows * cols));
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<float> v = RandomFloats(rng, static_cast<size_t>(cols));
          model::EncodeRow(dtype, v, w.data() + r * row_bytes);
          if (r == rows - 1) SetExtremeRow(dtype, w.data() + r * row_bytes, row_bytes);
          model::DecodeRow(dtype, w.data() + r * row_bytes,
                           std::span<float>(wf.data() + r * cols, static_cast<size_t>(cols)));
        }
        std::vector<uint8_t> packed(w.size());
        model::PackQuantPanels(dtype, w.data(), cols, 0, rows / model::kPanelRows, packed.data());
        // (70: more rows than the 512-bit q6_K kernel unpacks from.)
        for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 33, 70}) {
          if (k_quant && n > 9 && n != 17 && n != 70 && cols != 256) continue;  // (fewer)
          SCOPED_TRACE(::testing::Message() << model::DTypeName(dtype) << " cols=" << cols
                                            << " rows=" << rows << " n=" << n);
          std::vector<float> x = RandomFloats(rng, static_cast<size_t>(n * cols));
          for (int64_t c = 0; c < cols; ++c) x[c] = -1.0f;  // -127 against the extreme row
          const size_t xq_row = Q8RowBytes(dtype, cols);
          const std::vector<uint8_t> xq = QuantizeRows(dtype, x, n, cols);
          const int64_t ldy = rows + 5;
          const int64_t r0 = rows > model::kPanelRows ? model::kPanelRows : 0;
          std::vector<float> y(static_cast<size_t>(n * ldy), kSentinel);
          std::vector<float> y_scalar(y.size(), kSentinel);
          panels(packed.data(), static_cast<int64_t>(row_bytes), cols, r0, rows, xq.data(),
                 static_cast<int64_t>(xq_row), n, y.data(), ldy);
          scalar(w.data(), static_cast<int64_t>(row_bytes), cols, r0, rows, xq.data(),
                 static_cast<int64_t>(xq_row), n, y_scalar.data(), ldy);
          ExpectSliceNear(y, y_scalar, n, ldy, r0, rows, cols, [&](int i, int64_t r) {
            double abs_sum = 0.0;
            for (int64_t c = 0; c < cols; ++c) {
              abs_sum += std::fabs(static_cast<double>(wf[r * cols + c]) * x[i * cols + c]);
            }
            return 2.0 * abs_sum;
          });
          // matmul_q6_k_panels_unpacked (every level with panels): bit for bit the same, with
          // the scratch it is tuned for, one that holds a single unpacked panel (a slab per
          // panel) and one too small for a panel (the packed kernel).
          const QMatMulUnpackFn unpacked = kernels().matmul_q6_k_panels_unpacked;
          EXPECT_EQ(unpacked != nullptr, X86AtLeast(GetParam(), Isa::kAvx2));
          if (dtype == DType::kQ6_K && unpacked != nullptr) {
            const int64_t panel_bytes = cols / 256 * kUnpackedQ6_KBlockBytes;
            for (int64_t scratch_bytes : {kQuantUnpackScratchBytes, panel_bytes, panel_bytes - 1}) {
              std::vector<uint8_t> scratch(static_cast<size_t>(scratch_bytes), 0xa5);
              std::vector<float> y_unpacked(y.size(), kSentinel);
              unpacked(packed.data(), static_cast<int64_t>(row_bytes), cols, r0, rows, xq.data(),
                       static_cast<int64_t>(xq_row), n, y_unpacked.data(), ldy, scratch.data(),
                       scratch_bytes);
              ASSERT_EQ(std::memcmp(y.data(), y_unpacked.data(), y.size() * sizeof(float)), 0)
                  << "unpacked, scratch " << scratch_bytes;
            }
          }
          for (Isa other : {Isa::kAvx512Vnni, Isa::kAvx2}) {
            if (!(other == Isa::kAvx2 ? avx2_too : vnni_too)) continue;
            std::vector<float> y_other(y.size(), kSentinel);
            PanelKernel(KernelsFor(other), dtype)(
                packed.data(), static_cast<int64_t>(row_bytes), cols, r0, rows, xq.data(),
                static_cast<int64_t>(xq_row), n, y_other.data(), ldy);
            ASSERT_EQ(std::memcmp(y.data(), y_other.data(), y.size() * sizeof(float)), 0)
                << IsaName(other);
          }
        }
      }
    }
  }
}

// Attention over a KV block: rows of `hd` elements at a padded stride, as in the cache
// (where a head's row is one slice of a position's row).
TEST_P(SimdKernelsTest, DotRowsAndAxpyRowsMatchScalar) {
  std::mt19937 rng(7);
  for (DType dtype : {DType::kF32, DType::kF16}) {
    const size_t elem = dtype == DType::kF32 ? 4 : 2;
    for (int hd : {1, 5, 8, 9, 16, 31, 40, 64, 72, 112, 128, 130, 256}) {
      for (int count : {1, 3, 8, 9, 16, 17}) {
        SCOPED_TRACE(::testing::Message()
                     << model::DTypeName(dtype) << " hd=" << hd << " count=" << count);
        const size_t stride = static_cast<size_t>(hd + 3) * elem;  // padded rows
        const size_t per_row = stride / elem;
        const Weights kv = RandomWeights(rng, dtype, per_row * static_cast<size_t>(count));
        const void* rows = dtype == DType::kF32 ? static_cast<const void*>(kv.f32.data())
                                                : static_cast<const void*>(kv.bits.data());
        const std::vector<float> q = RandomFloats(rng, static_cast<size_t>(hd));
        const auto dot = dtype == DType::kF32 ? &KernelSet::dot_rows_f32 : &KernelSet::dot_rows_f16;
        std::vector<float> out(static_cast<size_t>(count) + 1, 7.0f);
        std::vector<float> out_ref = out;
        const float* qp = q.data();
        float* outp = out.data();
        float* out_refp = out_ref.data();
        (kernels().*dot)(&qp, &outp, 1, rows, stride, count, hd, 0.5f);
        (ScalarKernels().*dot)(&qp, &out_refp, 1, rows, stride, count, hd, 0.5f);
        for (int t = 0; t < count; ++t) {
          double abs_sum = 0.0;
          for (int i = 0; i < hd; ++i) abs_sum += std::fabs(q[i] * kv.f32[t * per_row + i]);
          EXPECT_NEAR(out[t], out_ref[t], 0.5f * SumTolerance(hd, abs_sum)) << "t=" << t;
        }
        EXPECT_EQ(out[count], 7.0f) << "wrote past count";

        const auto axpy =
            dtype == DType::kF32 ? &KernelSet::axpy_rows_f32 : &KernelSet::axpy_rows_f16;
        const std::vector<float> a = RandomFloats(rng, static_cast<size_t>(count));
        std::vector<float> y = RandomFloats(rng, static_cast<size_t>(hd) + 1);
        y[hd] = 7.0f;
        std::vector<float> y_ref = y;
        const float* ap = a.data();
        float* yp = y.data();
        float* y_refp = y_ref.data();
        (kernels().*axpy)(&ap, &yp, 1, rows, stride, count, hd);
        (ScalarKernels().*axpy)(&ap, &y_refp, 1, rows, stride, count, hd);
        for (int i = 0; i < hd; ++i) {
          double abs_sum = std::fabs(y_ref[i]);
          for (int t = 0; t < count; ++t) abs_sum += std::fabs(a[t] * kv.f32[t * per_row + i]);
          EXPECT_NEAR(y[i], y_ref[i], SumTolerance(count + 1, abs_sum)) << "i=" << i;
        }
        EXPECT_EQ(y[hd], 7.0f) << "wrote past hd";
      }
    }
  }
}

// Several queries in one call (the query heads of a KV head, the rows of a prefill chunk)
// get the same bits as each query alone, whatever their number: attention results do not
// depend on which queries share a call (batch invariance).
TEST_P(SimdKernelsTest, RowsOfSeveralQueriesMatchEachQueryAlone) {
  std::mt19937 rng(11);
  for (DType dtype : {DType::kF32, DType::kF16}) {
    const size_t elem = dtype == DType::kF32 ? 4 : 2;
    for (int hd : {5, 16, 64, 72, 128, 576}) {
      for (int count : {1, 4, 7, 16}) {
        for (int nq : {2, 3, 4, 5, 8, 9}) {
          SCOPED_TRACE(::testing::Message() << model::DTypeName(dtype) << " hd=" << hd
                                            << " count=" << count << " nq=" << nq);
          const size_t stride = static_cast<size_t>(hd + 3) * elem;
          const Weights kv = RandomWeights(rng, dtype, stride / elem * static_cast<size_t>(count));
          const void* rows = dtype == DType::kF32 ? static_cast<const void*>(kv.f32.data())
                                                  : static_cast<const void*>(kv.bits.data());
          const size_t uq = static_cast<size_t>(nq);
          const size_t ucount = static_cast<size_t>(count) + 1;  // + a guard
          const size_t uhd = static_cast<size_t>(hd) + 1;
          const std::vector<float> q = RandomFloats(rng, uq * static_cast<size_t>(hd));
          const std::vector<float> a = RandomFloats(rng, uq * static_cast<size_t>(count));
          std::vector<float> scores(uq * ucount, 7.0f), scores_alone = scores;
          std::vector<float> y = RandomFloats(rng, uq * uhd), y_alone = y;
          std::vector<const float*> qp(uq), ap(uq);
          std::vector<float*> sp(uq), yp(uq);
          for (size_t j = 0; j < uq; ++j) {
            qp[j] = q.data() + j * static_cast<size_t>(hd);
            ap[j] = a.data() + j * static_cast<size_t>(count);
            sp[j] = scores.data() + j * ucount;
            yp[j] = y.data() + j * uhd;
          }
          const auto dot =
              dtype == DType::kF32 ? &KernelSet::dot_rows_f32 : &KernelSet::dot_rows_f16;
          const auto axpy =
              dtype == DType::kF32 ? &KernelSet::axpy_rows_f32 : &KernelSet::axpy_rows_f16;
          (kernels().*dot)(qp.data(), sp.data(), nq, rows, stride, count, hd, 0.25f);
          (kernels().*axpy)(ap.data(), yp.data(), nq, rows, stride, count, hd);
          for (size_t j = 0; j < uq; ++j) {
            float* s1 = scores_alone.data() + j * ucount;
            float* y1 = y_alone.data() + j * uhd;
            (kernels().*dot)(&qp[j], &s1, 1, rows, stride, count, hd, 0.25f);
            (kernels().*axpy)(&ap[j], &y1, 1, rows, stride, count, hd);
          }
          EXPECT_EQ(0, std::memcmp(scores.data(), scores_alone.data(), scores.size() * 4));
          EXPECT_EQ(0, std::memcmp(y.data(), y_alone.data(), y.size() * 4));
          for (size_t j = 0; j < uq; ++j) {
            EXPECT_EQ(scores[j * ucount + ucount - 1], 7.0f) << "wrote past count, query " << j;
          }
        }
      }
    }
  }
}

// Widening f16/bf16 is exact: every one of the 65536 bit patterns converts to the same
// float as model::HalfToFloat / BF16ToFloat (NaNs compare as NaN).
TEST_P(SimdKernelsTest, ConversionsAreExactForEveryBitPattern) {
  std::vector<uint16_t> bits(65536 + 5);  // odd length exercises the tail
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i);
  std::vector<float> out(bits.size());
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    if (dtype == DType::kF16) {
      kernels().f16_to_f32(bits.data(), out.data(), static_cast<int64_t>(bits.size()));
    } else {
      kernels().bf16_to_f32(bits.data(), out.data(), static_cast<int64_t>(bits.size()));
    }
    int mismatches = 0;
    for (size_t i = 0; i < bits.size(); ++i) {
      const float want =
          dtype == DType::kF16 ? model::HalfToFloat(bits[i]) : model::BF16ToFloat(bits[i]);
      const bool same =
          std::isnan(want) ? std::isnan(out[i]) : std::memcmp(&want, &out[i], sizeof(float)) == 0;
      if (!same && ++mismatches <= 5) {
        ADD_FAILURE() << model::DTypeName(dtype) << " bits 0x" << std::hex << bits[i] << ": got "
                      << out[i] << ", want " << want;
      }
    }
    EXPECT_EQ(mismatches, 0) << model::DTypeName(dtype);
  }
}

// Narrowing to f16 writes model::FloatToHalf's bits: every f16 value (exact), every
// midpoint between neighbouring f16 values and a hair either side of it (rounding, ties
// to even, the subnormal range, the overflow edge at 65520), and random f32 bit patterns
// of every exponent. NaNs only need to stay NaNs.
TEST_P(SimdKernelsTest, NarrowingToF16MatchesFloatToHalf) {
  std::vector<float> in;
  for (uint32_t h = 0; h < 0x7C00; ++h) {  // non-negative finite halves, ascending
    const float lo = model::HalfToFloat(static_cast<uint16_t>(h));
    const float hi = h + 1 < 0x7C00 ? model::HalfToFloat(static_cast<uint16_t>(h + 1)) : 65536.0f;
    const float mid = lo + (hi - lo) / 2;  // exact: one more bit than f16 has
    for (float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, hi)}) {
      in.push_back(v);
      in.push_back(-v);
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    float v;
    std::memcpy(&v, &bits, sizeof v);
    in.push_back(v);
  }
  for (float v : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::nanf(""), 1e-45f, 3e38f}) {
    in.push_back(v);
  }
  std::vector<uint16_t> out(in.size() + 1, 0xABCD);  // one guard element past the end
  kernels().f32_to_f16(in.data(), out.data(), static_cast<int64_t>(in.size()));
  EXPECT_EQ(out.back(), 0xABCD) << "wrote past n";
  int mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t want = model::FloatToHalf(in[i]);
    const bool same = std::isnan(in[i]) ? std::isnan(model::HalfToFloat(out[i])) : out[i] == want;
    if (!same && ++mismatches <= 5) {
      ADD_FAILURE() << "in " << in[i] << " (index " << i << "): got 0x" << std::hex << out[i]
                    << ", want 0x" << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// swiglu with up = 1 is silu(g) = g / (1 + exp(-g)); over a dense sweep of g it checks
// the vector exp against exp in double at every exponent the clamps allow (for g near
// -87, silu is about g exp(g), so its relative error is exp's). Allowed: 8 float
// roundings (exp within a few, then the add, the divide and the multiply).
TEST_P(SimdKernelsTest, SwiGluMatchesSiluInDoubleOverExpsWholeRange) {
  std::vector<float> g;
  for (double v = -87.0; v <= 88.0; v += 0.00731) g.push_back(static_cast<float>(v));
  const std::vector<float> ones(g.size(), 1.0f);
  std::vector<float> out = g;
  kernels().swiglu(out.data(), ones.data(), static_cast<int64_t>(out.size()));
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    const double want = x / (1.0 + std::exp(-x));
    if (std::abs(out[i] - want) > 8 * 0x1.0p-24 * std::abs(want) + 1e-44 && ++bad <= 5) {
      ADD_FAILURE() << "silu(" << x << ") = " << out[i] << ", want " << want;
    }
  }
  EXPECT_EQ(bad, 0);
  // Beyond the range: silu(-100) is -3.7e-42 (about 0), silu(100) = 100; NaN stays NaN.
  std::vector<float> edge = {-100.0f, 100.0f, std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> up = {1.0f, 0.5f, 1.0f};
  kernels().swiglu(edge.data(), up.data(), 3);
  EXPECT_LE(std::abs(edge[0]), 1e-36f);
  EXPECT_EQ(edge[1], 50.0f);
  EXPECT_TRUE(std::isnan(edge[2]));
}

// rms_norm against the scalar oracle (sum of squares in double) for every tail length,
// rows of several scales, in place and not: the float sums differ from the double one by
// a few roundings of the sum, so each output by a few float roundings.
TEST_P(SimdKernelsTest, RmsNormMatchesScalarForEveryLength) {
  std::mt19937 rng(11);
  for (const int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 768, 2049}) {
    for (const float scale : {1.0f, 1e-3f, 1e3f}) {
      std::vector<float> x = RandomFloats(rng, static_cast<size_t>(n));
      for (float& v : x) v *= scale;
      const std::vector<float> w = RandomFloats(rng, static_cast<size_t>(n));
      std::vector<float> want(static_cast<size_t>(n));
      std::vector<float> got(static_cast<size_t>(n));
      ScalarKernels().rms_norm(x.data(), w.data(), n, 1e-5f, want.data());
      kernels().rms_norm(x.data(), w.data(), n, 1e-5f, got.data());
      std::vector<float> in_place = x;
      kernels().rms_norm(in_place.data(), w.data(), n, 1e-5f, in_place.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got[i], want[i], 4 * 0x1.0p-24 * std::abs(want[i]))
            << "n " << n << " scale " << scale << " i " << i;
        ASSERT_EQ(in_place[i], got[i]) << "n " << n << " i " << i;
      }
    }
  }
}

// A block whose max|x| is so small that 1 / d overflows (denormals) still quantizes as
// x / d: codes in order, 0 for 0, 127 for the maximum (x * (1 / d) would give inf and NaN).
TEST(QuantizeActivationsTest, TinyBlocksQuantizeLikeAnyOther) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 1e-40f * static_cast<float>(j);
  Q8Block block;
  QuantizeActivations(model::DType::kQ8_0, x.data(), 32, &block);
  EXPECT_GT(block.d, 0.0f);
  EXPECT_EQ(block.q[0], 0);
  EXPECT_EQ(block.q[31], 127);
  for (int j = 1; j < 32; ++j) EXPECT_LE(block.q[j - 1], block.q[j]) << j;
  EXPECT_EQ(block.q[16], 66);  // 16 / 31 * 127 = 65.55
}

// quantize_activations writes the same bytes as the scalar definition
// (q8_activations.h): random rows of several scales, and blocks that test the edges —
// all zeros with -0, halves that round to even (d = 1 exactly), a negative maximum, values
// that reach +-127, denormals.
TEST_P(SimdKernelsTest, QuantizeActivationsWritesTheScalarBytes) {
  std::mt19937 rng(10);
  for (const model::DType type :
       {model::DType::kQ8_0, model::DType::kQ4_0, model::DType::kQ5_0, model::DType::kQ5_1,
        model::DType::kQ4_K, model::DType::kQ5_K, model::DType::kQ6_K}) {
    const int64_t block = model::DTypeBlockElems(type);
    for (const int64_t cols : {int64_t{256}, int64_t{768}, int64_t{2048}}) {
      for (const float scale : {1.0f, 1e-3f, 300.0f}) {
        std::vector<float> x = RandomFloats(rng, static_cast<size_t>(cols));
        for (float& v : x) v *= scale;
        // Edge blocks where the row has room: zeros of both signs; d = 1 exactly with
        // halves; a negative maximum; denormals.
        const int64_t blocks = cols / block;
        std::fill(x.begin(), x.begin() + block, 0.0f);
        for (int64_t j = 0; j < block; j += 2) x[j] = -0.0f;
        const float halves[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 126.5f, -126.5f};
        if (blocks > 1) {
          for (int64_t j = 0; j < block; ++j) x[block + j] = halves[j % 8];
        }
        if (blocks > 2) x[2 * block + 5] = -40.0f * scale;
        if (blocks > 3) {
          for (int64_t j = 0; j < block; ++j) x[3 * block + j] = 1e-40f * static_cast<float>(j);
        }
        const size_t bytes = Q8RowBytes(type, cols);
        std::vector<uint8_t> want(bytes, 0xAA);
        std::vector<uint8_t> got(bytes, 0x55);
        QuantizeActivations(type, x.data(), cols, want.data());
        kernels().quantize_activations(type, x.data(), cols, got.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
            << model::DTypeName(type) << " cols " << cols << " scale " << scale;
      }
    }
  }
}

// swiglu against the scalar oracle for every tail length, with up != 1.
TEST_P(SimdKernelsTest, SwiGluMatchesScalarForEveryLength) {
  std::mt19937 rng(9);
  for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 31, 33, 100, 5632}) {
    std::vector<float> gate = RandomFloats(rng, static_cast<size_t>(n));
    for (float& v : gate) v *= 12.0f;
    const std::vector<float> up = RandomFloats(rng, static_cast<size_t>(n));
    std::vector<float> want = gate;
    std::vector<float> got = gate;
    ScalarKernels().swiglu(want.data(), up.data(), n);
    kernels().swiglu(got.data(), up.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(got[i], want[i], 8 * 0x1.0p-24 * std::abs(want[i]) + 1e-44)
          << "n " << n << " i " << i << " gate " << gate[i];
    }
  }
}

// softmax against the scalar oracle (which sums in double) for every tail length. Scores
// spread over [-100, 10] so that some differences fall below exp's normal range (the
// oracle's denormals against the vector levels' 0: the absolute term). The vector sum
// of n terms in kLanes lanes rounds about n / 8 times at most.
TEST_P(SimdKernelsTest, SoftmaxMatchesScalarForEveryLength) {
  std::mt19937 rng(10);
  std::uniform_real_distribution<float> u(-100.0f, 10.0f);
  for (int64_t n : {1, 2, 7, 8, 15, 16, 17, 31, 33, 100, 512, 4097}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = u(rng);
    std::vector<float> want = x;
    std::vector<float> got = x;
    ScalarKernels().softmax(want.data(), n);
    kernels().softmax(got.data(), n);
    const double rel = (16.0 + static_cast<double>(n) / 8.0) * 0x1.0p-24;
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(got[i], want[i], rel * want[i] + 1e-37) << "n " << n << " i " << i;
      total += got[i];
    }
    EXPECT_NEAR(total, 1.0, 1e-5) << "n " << n;
  }
  // One NaN score makes every weight NaN, as in the oracle; n = 0 writes nothing.
  std::vector<float> with_nan = {0.5f, std::numeric_limits<float>::quiet_NaN(), 1.0f, 2.0f};
  kernels().softmax(with_nan.data(), 4);
  for (float v : with_nan) EXPECT_TRUE(std::isnan(v));
  float untouched = 3.0f;
  kernels().softmax(&untouched, 0);
  EXPECT_EQ(untouched, 3.0f);
}

// Quantized weights, every level against
//  (a) the scalar integer kernels: the same integer block products (exact), only the
//      float scaling and summation order differ: SumTolerance;
//  (b) the oracle: weights decoded by model::DecodeRow times the float activations.
//      Quantizing x moves each element by at most d_b / 2 (d_b = max|x| / 127 of its
//      block), so |y - oracle| <= sum_b d_b / 2 * sum_{j in b} |w_j| plus rounding;
//  (c) avx_vnni only: bit for bit the kernels built from the same code with another
//      integer step (the same exact integers in the same lanes, the same float steps):
//      avx2's (vpmaddubsw + vpmaddwd), except row-major q8_0, whose codes run as w + 128
//      with the offset in lane 0 (avx2: |w| against x with w's sign, the same block sum
//      spread over the lanes otherwise): that one is avx512vnni's, where this CPU has it.
TEST_P(SimdKernelsTest, QuantizedMatMulMatchesScalarAndDequantizedOracle) {
  const bool avx2_too = GetParam() == Isa::kAvxVnni;
  std::mt19937 rng(5);
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                      DType::kQ5_K, DType::kQ6_K}) {
    const int64_t act_block = UsesQ8Blocks(dtype) ? 32 : 256;
    for (int64_t cols : {256, 288, 768, 1024, 8448}) {
      // cols = 288: nine 32-weight blocks (an odd count: the batch-1 kernels take blocks
      // in pairs or eights), no whole 256, so only for q8_0 / q4_0 and without
      // interleaving. cols = 8448: 264 blocks, more than one column chunk of the
      // batch-1 kernel for q8_0 / q4_0 (kVec8ChunkBlocks = 256).
      if (cols % act_block != 0) continue;
      if (cols == 8448 && act_block != 32) continue;
      // n = 70: the batched kernels take at most 64 activation rows per pass over the
      // weights (kQRowsPerPass), so the second pass starts at row 64; n = 65: that pass
      // has one row and takes the batch-1 path at an offset.
      for (int n : {1, 2, 3, 8, 17, 65, 70}) {
        SCOPED_TRACE(::testing::Message()
                     << model::DTypeName(dtype) << " cols=" << cols << " n=" << n);
        constexpr int64_t kRows = 6;  // interleaved: rows 1..5, a tile of 4 and one more
        const size_t row_bytes = model::DTypeBytes(dtype, static_cast<size_t>(cols));
        std::vector<uint8_t> w(kRows * row_bytes);
        std::vector<float> wf(static_cast<size_t>(kRows * cols));  // decoded weights
        for (int64_t r = 0; r < kRows; ++r) {
          const std::vector<float> v = RandomFloats(rng, static_cast<size_t>(cols));
          model::EncodeRow(dtype, v, w.data() + r * row_bytes);
        }
        if (dtype == DType::kQ8_0) {
          // Row 0 at the int8 extreme -128 that files may hold (|w| = 128 unsigned).
          for (int64_t b = 0; b < cols / 32; ++b) std::memset(&w[b * 34 + 2], 0x80, 32);
        }
        if (dtype == DType::kQ5_0 || dtype == DType::kQ5_1) {
          // Row 0 at the largest codes: every code 31 (qh and qs all ones; d, m as encoded).
          const int64_t head = dtype == DType::kQ5_0 ? 2 : 4;
          const int64_t bytes = model::DTypeBlockBytes(dtype);
          for (int64_t b = 0; b < cols / 32; ++b) std::memset(&w[b * bytes + head], 0xff, 20);
        }
        if (dtype == DType::kQ5_K) {
          // Row 0 at q5_K's largest products: every code 31, every scale and min 63.
          for (int64_t b = 0; b < cols / 256; ++b) std::memset(&w[b * 176 + 4], 0xff, 172);
        }
        for (int64_t r = 0; r < kRows; ++r) {
          model::DecodeRow(dtype, w.data() + r * row_bytes,
                           std::span<float>(wf.data() + r * cols, static_cast<size_t>(cols)));
        }
        std::vector<float> x = RandomFloats(rng, static_cast<size_t>(n * cols));
        for (int64_t c = 0; c < cols; ++c) x[c] = -1.0f;  // -127 against the -128 row
        const size_t xq_row = Q8RowBytes(dtype, cols);
        const std::vector<uint8_t> xq = QuantizeRows(dtype, x, n, cols);
        const int64_t ldy = kRows + 1;
        std::vector<float> y(static_cast<size_t>(n * ldy), 7.0f);
        std::vector<float> y_scalar = y;
        QuantKernel(kernels(), dtype)(w.data(), static_cast<int64_t>(row_bytes), cols, 0, kRows,
                                      xq.data(), static_cast<int64_t>(xq_row), n, y.data(), ldy);
        QuantKernel(ScalarKernels(), dtype)(w.data(), static_cast<int64_t>(row_bytes), cols, 0,
                                            kRows, xq.data(), static_cast<int64_t>(xq_row), n,
                                            y_scalar.data(), ldy);
        const Isa same = dtype == DType::kQ8_0 ? Isa::kAvx512Vnni : Isa::kAvx2;
        if (avx2_too && IsaSupported(same)) {
          std::vector<float> y_same(y.size(), 7.0f);
          QuantKernel(KernelsFor(same), dtype)(w.data(), static_cast<int64_t>(row_bytes), cols, 0,
                                               kRows, xq.data(), static_cast<int64_t>(xq_row), n,
                                               y_same.data(), ldy);
          EXPECT_EQ(std::memcmp(y.data(), y_same.data(), y.size() * sizeof(float)), 0)
              << "against " << IsaName(same);
        }
        // The same product with interleaved activations (every cols here is a multiple
        // of 256), rows 1..kRows only: the kernel must honour row_begin.
        const QMatMulFn il = cols % 256 == 0 ? InterleavedKernel(kernels(), dtype) : nullptr;
        std::vector<float> y_il(y.size(), 7.0f);
        if (il != nullptr) {
          const size_t il_row = Q8RowBytesInterleaved(dtype, cols);
          std::vector<uint8_t> xil(static_cast<size_t>(n) * il_row);
          for (int i = 0; i < n; ++i) {
            QuantizeActivationsInterleaved(dtype, x.data() + i * cols, cols,
                                           xil.data() + i * il_row);
          }
          il(w.data(), static_cast<int64_t>(row_bytes), cols, 1, kRows, xil.data(),
             static_cast<int64_t>(il_row), n, y_il.data(), ldy);
          if (avx2_too) {
            std::vector<float> y_avx2(y.size(), 7.0f);
            InterleavedKernel(KernelsFor(Isa::kAvx2), dtype)(
                w.data(), static_cast<int64_t>(row_bytes), cols, 1, kRows, xil.data(),
                static_cast<int64_t>(il_row), n, y_avx2.data(), ldy);
            EXPECT_EQ(std::memcmp(y_il.data(), y_avx2.data(), y.size() * sizeof(float)), 0)
                << "interleaved, against avx2";
          }
        } else if (cols % 256 == 0) {
          EXPECT_FALSE(X86AtLeast(GetParam(), Isa::kAvx2))
              << "every x86 vector level has interleaved kernels";
        }
        for (int i = 0; i < n; ++i) {
          const float* xi = x.data() + i * cols;
          for (int64_t r = 0; r < kRows; ++r) {
            const float* wr = wf.data() + r * cols;
            double oracle = 0.0;
            double abs_sum = 0.0;
            double bound = 0.0;
            for (int64_t b = 0; b < cols / act_block; ++b) {
              float amax = 0.0f;
              double w_abs = 0.0;
              for (int64_t c = b * act_block; c < (b + 1) * act_block; ++c) {
                amax = std::max(amax, std::fabs(xi[c]));
                w_abs += std::fabs(wr[c]);
                oracle += static_cast<double>(wr[c]) * xi[c];
                abs_sum += std::fabs(static_cast<double>(wr[c]) * xi[c]);
              }
              bound += amax / 127.0 / 2.0 * w_abs;
            }
            const float got = y[i * ldy + r];
            const float tol = SumTolerance(cols, 2.0 * abs_sum);
            EXPECT_NEAR(got, y_scalar[i * ldy + r], tol) << "i=" << i << " r=" << r;
            EXPECT_NEAR(got, oracle, bound * 1.01 + tol) << "i=" << i << " r=" << r;
            if (il != nullptr && r > 0) {
              EXPECT_NEAR(y_il[i * ldy + r], y_scalar[i * ldy + r], tol)
                  << "interleaved, i=" << i << " r=" << r;
            }
          }
          EXPECT_EQ(y[i * ldy + kRows], 7.0f) << "wrote outside rows";
          if (il != nullptr) {
            EXPECT_EQ(y_il[i * ldy], 7.0f) << "interleaved: wrote before row_begin";
            EXPECT_EQ(y_il[i * ldy + kRows], 7.0f) << "interleaved: wrote outside rows";
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLevels, SimdKernelsTest, ::testing::ValuesIn(kLevels),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

TEST(IsaTest, BestIsSupportedAndLevelsAreNested) {
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
  EXPECT_TRUE(IsaSupported(BestIsa()));
  // Every x86-64 level needs avx2; avx_vnni and the AVX-512 levels are independent.
  for (Isa isa : {Isa::kAvxVnni, Isa::kAvx512}) {
    if (IsaSupported(isa)) {
      EXPECT_TRUE(IsaSupported(Isa::kAvx2)) << IsaName(isa);
    }
  }
  if (IsaSupported(Isa::kAvx512Vnni)) {
    EXPECT_TRUE(IsaSupported(Isa::kAvx512));
  }
  if (IsaSupported(Isa::kNeonI8mm)) {
    EXPECT_TRUE(IsaSupported(Isa::kNeonDotprod));
  }
  if (IsaSupported(Isa::kNeonDotprod)) {
    EXPECT_TRUE(IsaSupported(Isa::kNeon));
  }
  EXPECT_EQ(KernelsFor(BestIsa()).isa, BestIsa());
  // Read by scripts/test-aarch64.sh, which checks the dispatch per emulated CPU.
  std::printf("[  NOTE    ] best kernel level: %s\n", std::string(IsaName(BestIsa())).c_str());
}

}  // namespace
}  // namespace kvserve::backends::cpu_blas
