#include "bench/report.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::bench {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

TEST(JsonTest, EscapesStringsAndWritesNumbers) {
  EXPECT_EQ(JsonString("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  JsonLine j;
  j.Add("s", "x").Add("i", 3).Add("u", uint64_t{1} << 40).Add("d", 0.5).Add("nan", 0.0 / 0.0);
  EXPECT_EQ(j.str(), R"({"s": "x", "i": 3, "u": 1099511627776, "d": 0.5, "nan": null})");
}

TEST(FormatTableTest, AlignsColumns) {
  const std::string t =
      FormatTable({"name", "n"}, {{"a", "1"}, {"long name", "123"}, {"b"}}, {false, true});
  EXPECT_EQ(t,
            "name         n\n"
            "--------------\n"
            "a            1\n"
            "long name  123\n"
            "b\n");
}

Measurement Decode(std::string backend, int batch, double tok_s) {
  Measurement m;
  m.model = "m.gguf";
  m.backend = std::move(backend);
  m.dtype = "f32";
  m.threads = 2;
  m.test = "decode";
  m.batch = batch;
  m.tokens = 8;
  m.repeats = 3;
  m.summary = common::Summary{3, tok_s, tok_s - 1, tok_s + 1, tok_s};
  m.bytes_per_token = 400'000'000;
  m.bandwidth_gbs = 32.0;
  return m;
}

TEST(MeasurementTest, WeightBandwidthCountsOneWeightPassPerStep) {
  const Measurement one = Decode("cpu_blas", 1, 64.0);
  EXPECT_DOUBLE_EQ(one.weight_gbs(), 25.6);  // 64 tok/s * 0.4 GB
  EXPECT_DOUBLE_EQ(one.fraction_of_bound(), 0.8);
  const Measurement sixteen = Decode("cpu_blas", 16, 512.0);  // 32 steps/s
  EXPECT_DOUBLE_EQ(sixteen.weight_gbs(), 12.8);
  Measurement prefill = one;
  prefill.test = "prefill";
  EXPECT_DOUBLE_EQ(prefill.weight_gbs(), 0.0);
}

TEST(MeasurementTest, JsonHasTheRequiredFields) {
  Measurement m = Decode("cpu_blas", 16, 512.0);
  m.kernel_level = "avx2";
  m.blas_core = "Haswell";
  const std::string j = MeasurementJson(m);
  for (const char* field :
       {R"("kernel_level": "avx2")", R"("blas_core": "Haswell")", R"("backend": "cpu_blas")",
        R"("dtype": "f32")", R"("threads": 2)", R"("test": "decode")", R"("batch": 16)",
        R"("tokens_per_s": 512)", R"("bytes_per_token": 400000000)", R"("bandwidth_gbs": 32)",
        R"("model": "m.gguf")", R"("repeats": 3)", R"("median": 512)", R"("min": 511)",
        R"("max": 513)"}) {
    EXPECT_THAT(j, HasSubstr(field));
  }
}

TEST(FormatReportTest, PrintsRatios) {
  Measurement bw;
  bw.test = "bandwidth";
  bw.threads = 2;
  bw.repeats = 5;
  bw.summary = common::Summary{5, 30.0, 28.0, 32.0, 30.0};
  bw.detail = "avx2 loads";
  const std::vector<Measurement> ms = {bw, Decode("reference", 1, 4.0),
                                       Decode("reference", 16, 8.0), Decode("cpu_blas", 1, 64.0),
                                       Decode("cpu_blas", 16, 512.0)};
  std::vector<Measurement> with_levels = ms;
  for (Measurement& m : with_levels) {
    if (m.test == "bandwidth") continue;
    m.kernel_level = m.backend == "cpu_blas" ? "avx512" : "scalar";
    m.blas_core = "SkylakeX";
  }
  const std::string r = FormatReport(with_levels);
  EXPECT_THAT(r, HasSubstr("read bandwidth, 2 threads: 32.0 GB/s best of 5 passes"));
  EXPECT_THAT(r, HasSubstr("cpu_blas: kernel level avx512, BLAS core SkylakeX\n"));
  EXPECT_THAT(r, HasSubstr("reference: kernel level scalar, BLAS core SkylakeX\n"));
  EXPECT_THAT(r, ContainsRegex("cpu_blas / reference +decode b1 +16.00x\n"));
  EXPECT_THAT(r, ContainsRegex("cpu_blas / reference +decode b16 +64.00x\n"));
  EXPECT_THAT(r, ContainsRegex("cpu_blas weight GB/s / measured GB/s +decode b1 +80.0%\n"));
  EXPECT_THAT(r, ContainsRegex("cpu_blas batch-16 / batch-1 +decode b16 +8.00x\n"));
  EXPECT_THAT(r, ContainsRegex("reference batch-16 / batch-1 +decode b16 +2.00x\n"));
  // The table row of cpu_blas batch 1: median, min, max, MB/token, GB/s, % of bound.
  EXPECT_THAT(r, ContainsRegex(
                     "cpu_blas +f32 +2 +decode +1 +8 +3 +64.0 +63.0 +65.0 +400.0 +25.60 +80.0\n"));
}

}  // namespace
}  // namespace kvserve::bench
