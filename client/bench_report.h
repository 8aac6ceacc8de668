// The load generator's measurements and report (client/load_generator.h): what each
// request did, and the summary (TTFT, inter-token latency and end-to-end percentiles,
// tokens/s, cache-hit ratio, errors by status code, calls by method and code) as JSON or
// text.
//
// Counts add up: requests.total = requests.ok + requests.failed, requests.failed is the
// sum of errors_by_code, and calls["GenerateStream"] holds the requests by code.
#ifndef KVSERVE_CLIENT_BENCH_REPORT_H_
#define KVSERVE_CLIENT_BENCH_REPORT_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"

namespace kvserve::client::bench {

// A status code as gRPC names it ("OK", "RESOURCE_EXHAUSTED").
std::string CodeName(absl::StatusCode code);
// `s` as a JSON string literal (quotes, backslashes and control characters escaped).
std::string JsonString(std::string_view s);

// One request (a GenerateStream call) as the client saw it (times in seconds on the
// client's clock).
struct RequestResult {
  absl::StatusCode code = absl::StatusCode::kOk;
  double ttft_s = -1.0;       // send -> first message with a token; < 0: none
  std::vector<double> itl_s;  // gaps between tokens: a message of k tokens after a gap
                              // g adds k gaps of g / k (the first message adds none)
  double e2e_s = 0.0;         // send -> end of the call
  int64_t prompt_tokens = 0;  // from the last message's usage
  int64_t cached_tokens_local = 0;
  int64_t cached_tokens_remote = 0;
  int64_t draft_tokens = 0;  // speculative drafts checked / accepted (usage)
  int64_t draft_tokens_accepted = 0;
  int64_t output_tokens = 0;  // the usage's completion tokens; without usage (a stream
                              // cancelled or failed) the tokens received
  int64_t messages = 0;       // stream messages received
  int turn = 0;               // 0-based turn of its conversation (0 for a single request)
};

// Calls by method ("GenerateStream", "OpenSession", "CloseSession") and status code
// name ("OK", "RESOURCE_EXHAUSTED", as gRPC names them).
using CallCounts = std::map<std::string, std::map<std::string, int64_t>>;

// Everything a run recorded (Recorder::Take).
struct Recording {
  std::vector<RequestResult> requests;
  CallCounts session_calls;  // the calls that are not requests
  // Answers that break the protocol, by description (e.g. "stream ended OK without
  // usage") -> count.
  std::map<std::string, int64_t> malformed;
  // Prompt text -> the distinct output texts of its greedy requests without history.
  std::map<std::string, std::set<std::string>> outputs;
};

// Collects results from many threads. Thread-safe.
class Recorder {
 public:
  void Add(RequestResult result);
  void AddSessionCall(const std::string& method, absl::StatusCode code);
  void AddMalformed(const std::string& description);
  void AddOutput(const std::string& prompt, std::string text);
  // Requests recorded so far, and how many failed (for a progress bar).
  void Counts(int64_t* done, int64_t* failed) const;
  Recording Take();

 private:
  mutable std::mutex mu_;
  Recording recording_ ABSL_GUARDED_BY(mu_);
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;  // milliseconds
};

struct Report {
  // Requests: total = ok + failed.
  int64_t total = 0, ok = 0, failed = 0;
  std::map<std::string, int64_t> errors_by_code;  // of requests: "RESOURCE_EXHAUSTED" -> count
  // Every call, requests (as "GenerateStream") and session calls; failed_calls counts
  // those whose code is not OK.
  CallCounts calls;
  int64_t failed_calls = 0;
  std::map<std::string, int64_t> malformed;  // as in Recording
  double duration_s = 0;
  int64_t prompt_tokens = 0, cached_tokens_local = 0, cached_tokens_remote = 0;
  int64_t output_tokens = 0, stream_messages = 0;
  // Speculative decoding: draft tokens checked and accepted; accepted / checked (0 without).
  int64_t draft_tokens = 0, draft_tokens_accepted = 0;
  double draft_acceptance = 0;
  double output_tokens_per_s = 0, requests_per_s = 0;
  // (cached local + remote) / prompt tokens of the successful requests; 0 without any.
  double cache_hit_ratio = 0;
  // Successful conversation turns after the first, and those of them that reported cached
  // tokens (their history was reused).
  int64_t later_turns = 0, later_turns_cached = 0;
  Percentiles ttft, itl, e2e;
  std::map<std::string, std::set<std::string>> outputs;  // as in Recording
};

// Summarizes what a run that took `duration_s` of wall time recorded.
Report Summarize(Recording recording, double duration_s);

// The report as one JSON object; `config_json` (a JSON object text) is embedded as
// "config". "outputs" (prompt -> [texts]) is there only when some were recorded.
std::string ToJson(const Report& report, const std::string& config_json);
// The report as a few human-readable lines.
std::string ToText(const Report& report);

}  // namespace kvserve::client::bench

#endif  // KVSERVE_CLIENT_BENCH_REPORT_H_
