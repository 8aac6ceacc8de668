// What kvserve-bench measured, and how it is printed: JSON lines and an aligned table.
#ifndef KVSERVE_BENCH_REPORT_H_
#define KVSERVE_BENCH_REPORT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/stats.h"

namespace kvserve::bench {

// One measurement. For test "prefill" and "decode", `summary` is over tokens/s samples;
// for "bandwidth" over GB/s samples (and backend, dtype, batch, bytes_per_token are unset).
struct Measurement {
  std::string model;    // file name of the model
  std::string backend;  // "reference", "cpu_blas", ...
  std::string dtype;    // matrix element type: "f32", "f16", "bf16", "q8_0"
  int threads = 0;
  std::string test;  // "prefill", "decode" or "bandwidth"
  int batch = 0;     // concurrent sequences (1 for prefill)
  int tokens = 0;    // prompt tokens (prefill) or decode steps per sequence (decode)
  int repeats = 0;
  common::Summary summary;
  uint64_t bytes_per_token = 0;  // weight bytes one decode step streams
  double bandwidth_gbs = 0.0;    // the machine's measured read bandwidth (best pass)
  // Decode only, when probes were paired with repeats (--paired-probe-mib): the median
  // over repeats of (that repeat's weight GB/s / the probe run just before it). On a
  // shared machine the bandwidth left to us drifts by tens of percent within a minute;
  // pairing keeps each ratio to one moment. 0 when not measured.
  double paired_fraction = 0.0;
  std::string detail;  // free text, e.g. the bandwidth probe's load width
  // The SIMD kernel level the backend dispatched to ("avx512bf16", "avx512vnni", "avx512",
  // "avx_vnni", "avx2", "scalar") and the OpenBLAS core the process runs ("SkylakeX"); empty for
  // the bandwidth probe.
  std::string kernel_level;
  std::string blas_core;

  // Weight bytes streamed per second by decode steps (median steps/s * bytes_per_token;
  // steps/s = tokens/s / batch), in GB/s; 0 unless test == "decode".
  double weight_gbs() const;
  // How close decode runs to the bandwidth bound: paired_fraction when measured, else
  // weight_gbs() / bandwidth_gbs.
  double fraction_of_bound() const;
};

// `s` as a JSON string literal, quotes included (control characters as \u00XX).
std::string JsonString(std::string_view s);

// Builds one JSON object on one line; keys in insertion order. Non-finite numbers
// become null.
class JsonLine {
 public:
  JsonLine& Add(std::string_view key, std::string_view value);
  JsonLine& Add(std::string_view key, const char* value) {
    return Add(key, std::string_view(value));
  }
  JsonLine& Add(std::string_view key, double value);
  JsonLine& Add(std::string_view key, int64_t value);
  JsonLine& Add(std::string_view key, int value) { return Add(key, static_cast<int64_t>(value)); }
  JsonLine& Add(std::string_view key, uint64_t value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string body_;
};

// The JSON object of one measurement: model, backend, dtype, threads, test, batch,
// tokens, repeats, tokens_per_s (the median; 0 for bandwidth), median, min, max, unit
// ("tokens/s" or "GB/s"), bytes_per_token, bandwidth_gbs, weight_gbs, fraction_of_bound,
// paired (whether fraction_of_bound came from paired probes), detail.
std::string MeasurementJson(const Measurement& m);

// Formats rows as columns separated by two spaces, each as wide as its widest cell;
// columns whose `right_align` entry is true are right-aligned. A dashed rule follows the
// header. Rows shorter than the header get empty cells.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows,
                        const std::vector<bool>& right_align);

// `v` with `digits` decimals ("%.*f").
std::string Fixed(double v, int digits);

// The human report: the measured bandwidth, a table of every prefill/decode
// measurement, then the ratios: each backend against "reference" (same test and batch),
// decode weight GB/s over measured GB/s, and aggregate decode at each batch > 1 over
// batch 1 of the same backend.
std::string FormatReport(const std::vector<Measurement>& measurements);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_REPORT_H_
