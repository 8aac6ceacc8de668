#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve::bench {
namespace {

std::string Number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

const Measurement* Find(const std::vector<Measurement>& ms, std::string_view backend,
                        std::string_view test, int batch) {
  for (const Measurement& m : ms) {
    if (m.backend == backend && m.test == test && m.batch == batch) return &m;
  }
  return nullptr;
}

std::string Label(const Measurement& m) {
  return m.test == "prefill" ? absl::StrCat("prefill ", m.tokens)
                             : absl::StrCat("decode b", m.batch);
}

}  // namespace

double Measurement::weight_gbs() const {
  if (test != "decode" || batch <= 0) return 0.0;
  return summary.median / batch * static_cast<double>(bytes_per_token) / 1e9;
}

double Measurement::fraction_of_bound() const {
  if (paired_fraction > 0.0) return paired_fraction;
  return bandwidth_gbs > 0.0 ? weight_gbs() / bandwidth_gbs : 0.0;
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

void JsonLine::Key(std::string_view key) {
  if (!body_.empty()) body_ += ", ";
  body_ += JsonString(key);
  body_ += ": ";
}

JsonLine& JsonLine::Add(std::string_view key, std::string_view value) {
  Key(key);
  body_ += JsonString(value);
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, double value) {
  Key(key);
  body_ += Number(value);
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, int64_t value) {
  Key(key);
  body_ += absl::StrCat(value);
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, uint64_t value) {
  Key(key);
  body_ += absl::StrCat(value);
  return *this;
}

std::string MeasurementJson(const Measurement& m) {
  const bool bandwidth = m.test == "bandwidth";
  JsonLine j;
  j.Add("model", m.model)
      .Add("backend", m.backend)
      .Add("dtype", m.dtype)
      .Add("threads", m.threads)
      .Add("test", m.test)
      .Add("batch", m.batch)
      .Add("tokens", m.tokens)
      .Add("repeats", m.repeats)
      .Add("tokens_per_s", bandwidth ? 0.0 : m.summary.median)
      .Add("median", m.summary.median)
      .Add("min", m.summary.min)
      .Add("max", m.summary.max)
      .Add("unit", bandwidth ? "GB/s" : "tokens/s")
      .Add("bytes_per_token", m.bytes_per_token)
      .Add("bandwidth_gbs", m.bandwidth_gbs)
      .Add("weight_gbs", m.weight_gbs())
      .Add("fraction_of_bound", m.fraction_of_bound())
      .Add("paired", m.paired_fraction > 0.0 ? 1 : 0)
      .Add("detail", m.detail)
      .Add("kernel_level", m.kernel_level)
      .Add("blas_core", m.blas_core);
  return j.str();
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows,
                        const std::vector<bool>& right_align) {
  const size_t cols = header.size();
  std::vector<size_t> width(cols, 0);
  auto cell = [](const std::vector<std::string>& row, size_t c) -> std::string_view {
    return c < row.size() ? std::string_view(row[c]) : std::string_view();
  };
  for (size_t c = 0; c < cols; ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], cell(row, c).size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t c = 0; c < cols; ++c) {
      const std::string_view v = cell(row, c);
      const std::string pad(width[c] - v.size(), ' ');
      const bool right = c < right_align.size() && right_align[c];
      if (c > 0) out += "  ";
      out += right ? absl::StrCat(pad, std::string(v)) : absl::StrCat(std::string(v), pad);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header);
  size_t total = 0;
  for (size_t c = 0; c < cols; ++c) total += width[c] + (c > 0 ? 2 : 0);
  out += std::string(total, '-') + "\n";
  for (const auto& row : rows) out += line(row);
  return out;
}

std::string FormatReport(const std::vector<Measurement>& ms) {
  std::string out;
  for (const Measurement& m : ms) {
    if (m.test != "bandwidth") continue;
    out += absl::StrCat("read bandwidth, ", m.threads, " threads: ", Fixed(m.summary.max, 1),
                        " GB/s best of ", m.repeats, " passes (median ", Fixed(m.summary.median, 1),
                        "; ", m.detail, ")\n\n");
  }
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> backends;
  for (const Measurement& m : ms) {
    if (m.test == "bandwidth") continue;
    if (std::find(backends.begin(), backends.end(), m.backend) == backends.end()) {
      backends.push_back(m.backend);
      if (!m.kernel_level.empty()) {
        out += absl::StrCat(m.backend, ": kernel level ", m.kernel_level, ", BLAS core ",
                            m.blas_core, "\n");
      }
    }
    const bool decode = m.test == "decode";
    rows.push_back({m.model, m.backend, m.dtype, absl::StrCat(m.threads), m.test,
                    absl::StrCat(m.batch), absl::StrCat(m.tokens), absl::StrCat(m.repeats),
                    Fixed(m.summary.median, 1), Fixed(m.summary.min, 1), Fixed(m.summary.max, 1),
                    Fixed(static_cast<double>(m.bytes_per_token) / 1e6, 1),
                    decode ? Fixed(m.weight_gbs(), 2) : "",
                    decode && m.bandwidth_gbs > 0 ? Fixed(100.0 * m.fraction_of_bound(), 1) : ""});
  }
  out += FormatTable(
      {"model", "backend", "dtype", "threads", "test", "batch", "tokens", "repeats", "tok/s", "min",
       "max", "MB/token", "weight GB/s", "% of bw"},
      rows,
      {false, false, false, true, false, true, true, true, true, true, true, true, true, true});

  // Ratios against the reference backend, test by test.
  std::vector<std::vector<std::string>> ratio_rows;
  for (const Measurement& m : ms) {
    if (m.test == "bandwidth" || m.backend == "reference") continue;
    const Measurement* ref = Find(ms, "reference", m.test, m.batch);
    if (ref == nullptr || ref->summary.median <= 0.0) continue;
    // Token counts may differ (the reference runs shorter); tokens/s still compare.
    ratio_rows.push_back({absl::StrCat(m.backend, " / reference"),
                          m.test == "prefill" ? std::string("prefill") : Label(m),
                          Fixed(m.summary.median / ref->summary.median, 2) + "x"});
  }
  // Decode against the bandwidth bound, and batching gains, backend by backend.
  for (const std::string& b : backends) {
    for (const Measurement& m : ms) {
      if (m.backend == b && m.test == "decode" && m.bandwidth_gbs > 0.0) {
        ratio_rows.push_back({absl::StrCat(b, " weight GB/s / measured GB/s",
                                           m.paired_fraction > 0.0 ? " (paired)" : ""),
                              Label(m), Fixed(100.0 * m.fraction_of_bound(), 1) + "%"});
      }
    }
    const Measurement* one = Find(ms, b, "decode", 1);
    for (const Measurement& m : ms) {
      if (one == nullptr || one->summary.median <= 0.0) break;
      if (m.backend == b && m.test == "decode" && m.batch > 1) {
        ratio_rows.push_back({absl::StrCat(b, " batch-", m.batch, " / batch-1"), Label(m),
                              Fixed(m.summary.median / one->summary.median, 2) + "x"});
      }
    }
  }
  if (!ratio_rows.empty()) {
    out += "\n";
    out += FormatTable({"ratio", "test", "value"}, ratio_rows, {false, false, true});
  }
  return out;
}

}  // namespace kvserve::bench
