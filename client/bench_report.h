// kvserve-cli bench's measurements and report: what each request did, and the summary
// (TTFT, inter-token latency and end-to-end percentiles, tokens/s, cache-hit ratio,
// errors by status code) as JSON or text.
//
// Counts add up: requests.total = requests.ok + requests.failed, and requests.failed is
// the sum of errors_by_code.
#ifndef KVSERVE_CLIENT_BENCH_REPORT_H_
#define KVSERVE_CLIENT_BENCH_REPORT_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"

namespace kvserve::client::bench {

// One request as the client saw it (times in seconds on the client's clock).
struct RequestResult {
  absl::StatusCode code = absl::StatusCode::kOk;
  double ttft_s = -1.0;       // send -> first message with a token; < 0: none
  std::vector<double> itl_s;  // gaps between tokens: a message of k tokens after a gap
                              // g adds k gaps of g / k (the first message adds none)
  double e2e_s = 0.0;         // send -> end of the call
  int64_t prompt_tokens = 0;  // from the last message's usage
  int64_t cached_tokens_local = 0;
  int64_t cached_tokens_remote = 0;
  int64_t output_tokens = 0;  // tokens received
};

// Collects results from many threads. Thread-safe.
class Recorder {
 public:
  void Add(RequestResult result);
  // Requests recorded so far, and how many failed (for a progress bar).
  void Counts(int64_t* done, int64_t* failed) const;
  std::vector<RequestResult> Take();

 private:
  mutable std::mutex mu_;
  std::vector<RequestResult> results_ ABSL_GUARDED_BY(mu_);
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;  // milliseconds
};

struct Report {
  int64_t total = 0, ok = 0, failed = 0;
  std::map<std::string, int64_t> errors_by_code;  // "RESOURCE_EXHAUSTED" -> count
  double duration_s = 0;
  int64_t prompt_tokens = 0, cached_tokens_local = 0, cached_tokens_remote = 0;
  int64_t output_tokens = 0;
  double output_tokens_per_s = 0, requests_per_s = 0;
  // (cached local + remote) / prompt tokens of the successful requests; 0 without any.
  double cache_hit_ratio = 0;
  Percentiles ttft, itl, e2e;
};

// Summarizes `results` of a run that took `duration_s` of wall time.
Report Summarize(const std::vector<RequestResult>& results, double duration_s);

// The report as one JSON object; `config_json` (a JSON object text) is embedded as
// "config".
std::string ToJson(const Report& report, const std::string& config_json);
// The report as a few human-readable lines.
std::string ToText(const Report& report);

}  // namespace kvserve::client::bench

#endif  // KVSERVE_CLIENT_BENCH_REPORT_H_
