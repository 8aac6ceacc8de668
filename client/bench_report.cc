#include "client/bench_report.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/stats.h"

namespace kvserve::client::bench {

void Recorder::Add(RequestResult result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (result.code != absl::StatusCode::kOk) ++failed_;
  results_.push_back(std::move(result));
}

void Recorder::Counts(int64_t* done, int64_t* failed) const {
  std::lock_guard<std::mutex> lock(mu_);
  *done = static_cast<int64_t>(results_.size());
  *failed = failed_;
}

std::vector<RequestResult> Recorder::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(results_);
}

namespace {

Percentiles Of(const std::vector<double>& seconds) {
  Percentiles p;
  if (seconds.empty()) return p;
  p.p50 = common::Percentile(seconds, 0.5) * 1e3;
  p.p90 = common::Percentile(seconds, 0.9) * 1e3;
  p.p99 = common::Percentile(seconds, 0.99) * 1e3;
  double sum = 0;
  for (double s : seconds) sum += s;
  p.mean = sum / static_cast<double>(seconds.size()) * 1e3;
  return p;
}

std::string PercentilesJson(const Percentiles& p) {
  return absl::StrFormat(R"({"p50":%.3f,"p90":%.3f,"p99":%.3f,"mean":%.3f})", p.p50, p.p90, p.p99,
                         p.mean);
}

}  // namespace

Report Summarize(const std::vector<RequestResult>& results, double duration_s) {
  Report r;
  r.duration_s = duration_s;
  std::vector<double> ttft, itl, e2e;
  for (const RequestResult& x : results) {
    ++r.total;
    r.output_tokens += x.output_tokens;
    if (x.code != absl::StatusCode::kOk) {
      ++r.failed;
      ++r.errors_by_code[absl::AsciiStrToUpper(absl::StatusCodeToString(x.code))];
      continue;
    }
    ++r.ok;
    r.prompt_tokens += x.prompt_tokens;
    r.cached_tokens_local += x.cached_tokens_local;
    r.cached_tokens_remote += x.cached_tokens_remote;
    if (x.ttft_s >= 0) ttft.push_back(x.ttft_s);
    itl.insert(itl.end(), x.itl_s.begin(), x.itl_s.end());
    e2e.push_back(x.e2e_s);
  }
  if (duration_s > 0) {
    r.output_tokens_per_s = static_cast<double>(r.output_tokens) / duration_s;
    r.requests_per_s = static_cast<double>(r.ok) / duration_s;
  }
  if (r.prompt_tokens > 0) {
    r.cache_hit_ratio = static_cast<double>(r.cached_tokens_local + r.cached_tokens_remote) /
                        static_cast<double>(r.prompt_tokens);
  }
  r.ttft = Of(ttft);
  r.itl = Of(itl);
  r.e2e = Of(e2e);
  return r;
}

std::string ToJson(const Report& r, const std::string& config_json) {
  std::string errors;
  for (const auto& [code, n] : r.errors_by_code) {
    absl::StrAppend(&errors, errors.empty() ? "" : ",", "\"", code, "\":", n);
  }
  return absl::StrCat(
      "{\"requests\":{\"total\":", r.total, ",\"ok\":", r.ok, ",\"failed\":", r.failed,
      "},\"errors_by_code\":{", errors, "},", absl::StrFormat("\"duration_s\":%.4f,", r.duration_s),
      "\"tokens\":{\"prompt\":", r.prompt_tokens, ",\"cached_local\":", r.cached_tokens_local,
      ",\"cached_remote\":", r.cached_tokens_remote, ",\"output\":", r.output_tokens, "},",
      absl::StrFormat("\"output_tokens_per_s\":%.2f,\"requests_per_s\":%.3f,"
                      "\"cache_hit_ratio\":%.4f,",
                      r.output_tokens_per_s, r.requests_per_s, r.cache_hit_ratio),
      "\"ttft_ms\":", PercentilesJson(r.ttft), ",\"itl_ms\":", PercentilesJson(r.itl),
      ",\"e2e_ms\":", PercentilesJson(r.e2e), ",\"config\":", config_json, "}");
}

std::string ToText(const Report& r) {
  std::string errors;
  for (const auto& [code, n] : r.errors_by_code) absl::StrAppend(&errors, " ", code, "=", n);
  return absl::StrCat(
      absl::StrFormat("requests: %d total, %d ok, %d failed%s\n", r.total, r.ok, r.failed,
                      errors.empty() ? "" : absl::StrCat(" (", errors.substr(1), ")")),
      absl::StrFormat("duration: %.2f s; %.1f output tokens/s, %.2f requests/s\n", r.duration_s,
                      r.output_tokens_per_s, r.requests_per_s),
      absl::StrFormat("tokens: prompt %d (cached local %d, remote %d; hit ratio %.3f), output %d\n",
                      r.prompt_tokens, r.cached_tokens_local, r.cached_tokens_remote,
                      r.cache_hit_ratio, r.output_tokens),
      absl::StrFormat("ttft ms: p50 %.2f p90 %.2f p99 %.2f mean %.2f\n", r.ttft.p50, r.ttft.p90,
                      r.ttft.p99, r.ttft.mean),
      absl::StrFormat("itl ms:  p50 %.2f p90 %.2f p99 %.2f mean %.2f\n", r.itl.p50, r.itl.p90,
                      r.itl.p99, r.itl.mean),
      absl::StrFormat("e2e ms:  p50 %.2f p90 %.2f p99 %.2f mean %.2f\n", r.e2e.p50, r.e2e.p90,
                      r.e2e.p99, r.e2e.mean));
}

}  // namespace kvserve::client::bench
