#include "backends/kernels/matvec.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/kernels/ops.h"
#include "backends/testing/random_model.h"
#include "gtest/gtest.h"

namespace kvserve::backends::kernels {
namespace {

using model::DType;
using model::TensorView;
using testing::EncodeRow;

// A matrix in a given dtype, owning its bytes.
struct Matrix {
  Matrix(const std::vector<float>& values, int64_t rows, int64_t cols, DType dtype)
      : bytes(EncodeRow(values, dtype)), view{dtype, bytes.data(), rows, cols} {}
  std::vector<uint8_t> bytes;
  TensorView view;
};

// Seed 000: h_last = [2, 1, -1], W_LM (H=3 x V=4) = [[1,0,1,-1],[1,2,0,0],[-1,0,1,1]],
// logits = [4, 2, 1, -3], greedy picks token 0. Our weights are stored one row per output
// (TensorView convention), so the LM head tensor is W_LM transposed: [V=4, H=3].
TEST(LmHeadSeedTest, WorkedExampleFromSeed000) {
  const std::vector<float> w_lm_t = {1,  1, -1,  // token 0 (民)
                                     0,  2, 0,   // token 1 (工)
                                     1,  0, 1,   // token 2 (们)
                                     -1, 0, 1};  // token 3 (生)
  const std::vector<float> h = {2, 1, -1};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {  // all exact for these values
    const Matrix w(w_lm_t, 4, 3, dtype);
    std::vector<float> logits(4);
    MatVec(w.view, h, logits);
    EXPECT_EQ(logits, (std::vector<float>{4, 2, 1, -3})) << model::DTypeName(dtype);
    EXPECT_EQ(ArgMax(logits), 0);
  }
}

TEST(LmHeadSeedTest, WorkedExampleInQ8_0) {
  // q8_0 needs 32 columns: pad h and each row with zeros. Max |w| = 1 per block, so the
  // scale is f16(1/127) and the result is within 1e-3 of the exact logits.
  std::vector<float> w_lm_t(4 * 32, 0.0f);
  const float rows[4][3] = {{1, 1, -1}, {0, 2, 0}, {1, 0, 1}, {-1, 0, 1}};
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) w_lm_t[r * 32 + c] = rows[r][c];
  }
  std::vector<float> h(32, 0.0f);
  h[0] = 2;
  h[1] = 1;
  h[2] = -1;
  const Matrix w(w_lm_t, 4, 32, DType::kQ8_0);
  std::vector<float> logits(4);
  MatVec(w.view, h, logits);
  const float want[4] = {4, 2, 1, -3};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(logits[i], want[i], 4e-3) << i;
  EXPECT_EQ(ArgMax(logits), 0);
}

std::vector<float> Pseudorandom(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  return v;
}

// For each dtype: (1) MatVec equals an f32 MatVec over the dequantised weights (the
// conversion is element by element, nothing else differs), and (2) it is within the
// dtype's rounding bound of the f32 original.
TEST(MatVecTest, LowPrecisionMatchesF32WithinRoundingBound) {
  const int64_t rows = 7, cols = 96;
  const std::vector<float> w32 = Pseudorandom(rows * cols, 1);
  const std::vector<float> x = Pseudorandom(cols, 2);
  const Matrix ref(w32, rows, cols, DType::kF32);
  std::vector<float> y32(rows);
  MatVec(ref.view, x, y32);

  for (DType dtype : {DType::kF16, DType::kBF16, DType::kQ8_0}) {
    SCOPED_TRACE(std::string(model::DTypeName(dtype)));
    const Matrix w(w32, rows, cols, dtype);
    std::vector<float> y(rows);
    MatVec(w.view, x, y);

    std::vector<float> dequantised(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      RowToFloat(w.view, r, std::span<float>(dequantised).subspan(r * cols, cols));
    }
    const Matrix deq(dequantised, rows, cols, DType::kF32);
    std::vector<float> y_deq(rows);
    MatVec(deq.view, x, y_deq);

    for (int64_t r = 0; r < rows; ++r) {
      double abs_sum = 0, bound = 0;
      for (int64_t c = 0; c < cols; ++c) abs_sum += std::fabs(w32[r * cols + c] * x[c]);
      if (dtype == DType::kF16) bound = abs_sum * std::ldexp(1.0, -11);
      if (dtype == DType::kBF16) bound = abs_sum * std::ldexp(1.0, -8);
      if (dtype == DType::kQ8_0) {
        // Each element is off by at most half a step (max|w| / 254) plus the f16 scale's
        // relative rounding.
        for (int64_t b = 0; b < cols / 32; ++b) {
          double amax = 0, xsum = 0;
          for (int j = 0; j < 32; ++j) {
            amax = std::fmax(amax, std::fabs(w32[r * cols + b * 32 + j]));
            xsum += std::fabs(x[b * 32 + j]);
          }
          bound += amax / 254.0 * xsum;
        }
        bound += abs_sum * std::ldexp(1.0, -10);
      }
      EXPECT_NEAR(y[r], y32[r], bound + 1e-5) << "row " << r;
      EXPECT_NEAR(y[r], y_deq[r], 1e-5 * (1 + abs_sum)) << "row " << r;
      EXPECT_NE(y[r], y32[r]) << "row " << r << ": rounding should show";
    }
  }
}

// The 256-element k-quants and q5_0 / q5_1 (decoded per block like them): MatVec and
// DotRow equal the f32 product over the weights RowToFloat decodes (model::DecodeRow,
// element by element), up to float summation.
TEST(MatVecTest, KQuantsAreTheProductOfTheirDecodedWeights) {
  const int64_t rows = 3, cols = 512;
  const std::vector<float> w32 = Pseudorandom(rows * cols, 5);
  const std::vector<float> x = Pseudorandom(cols, 6);
  for (DType dtype : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ5_0, DType::kQ5_1}) {
    SCOPED_TRACE(std::string(model::DTypeName(dtype)));
    const Matrix w(w32, rows, cols, dtype);
    std::vector<float> y(rows);
    MatVec(w.view, x, y);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> row(cols);
      RowToFloat(w.view, r, row);
      double want = 0, abs_sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        want += static_cast<double>(row[c]) * x[c];
        abs_sum += std::fabs(static_cast<double>(row[c]) * x[c]);
      }
      EXPECT_NEAR(y[r], want, 1e-6 * abs_sum) << "row " << r;
      EXPECT_EQ(DotRow(w.view, r, x), y[r]) << "row " << r;
    }
  }
}

TEST(MatVecTest, RowToFloatRoundTripsRepresentableValues) {
  const std::vector<float> values = {0.5f, -1.25f, 3.0f, 0.0f, -0.0078125f, 1024.0f};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Matrix w(values, 2, 3, dtype);
    std::vector<float> out(3);
    RowToFloat(w.view, 1, out);
    EXPECT_EQ(out, (std::vector<float>{0.0f, -0.0078125f, 1024.0f}));
  }
}

TEST(MatVecTest, DotRowOfOneHotIsElement) {
  const std::vector<float> values = Pseudorandom(3 * 32, 9);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    const Matrix w(values, 3, 32, dtype);
    std::vector<float> row(32);
    RowToFloat(w.view, 2, row);
    for (int c : {0, 5, 31}) {
      std::vector<float> one_hot(32, 0.0f);
      one_hot[c] = 1.0f;
      EXPECT_EQ(DotRow(w.view, 2, one_hot), row[c]);
    }
  }
}

TEST(MatVecTest, MatMulRowsIsRowwiseMatVec) {
  const int64_t rows = 5, cols = 32, n = 3;
  const Matrix w(Pseudorandom(rows * cols, 3), rows, cols, DType::kF16);
  const std::vector<float> x = Pseudorandom(n * cols, 4);
  std::vector<float> y(n * rows);
  MatMulRows(w.view, x, y);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> yt(rows);
    MatVec(w.view, std::span<const float>(x).subspan(t * cols, cols), yt);
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(y[t * rows + r], yt[r]);
  }
}

}  // namespace
}  // namespace kvserve::backends::kernels
