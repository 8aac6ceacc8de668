#include "client/bench_report.h"

#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/stats.h"

namespace kvserve::client::bench {

std::string CodeName(absl::StatusCode code) {
  return absl::AsciiStrToUpper(absl::StatusCodeToString(code));
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", c));
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
  return out;
}

namespace {

// {"k":v,...} of a map whose values `value` formats as JSON.
template <typename Map, typename Format>
std::string JsonObject(const Map& map, Format value) {
  std::string out = "{";
  for (const auto& [key, v] : map) {
    absl::StrAppend(&out, out.size() > 1 ? "," : "", JsonString(key), ":", value(v));
  }
  return out + "}";
}

}  // namespace

void Recorder::Add(RequestResult result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (result.code != absl::StatusCode::kOk) ++failed_;
  recording_.requests.push_back(std::move(result));
}

void Recorder::AddSessionCall(const std::string& method, absl::StatusCode code) {
  std::lock_guard<std::mutex> lock(mu_);
  ++recording_.session_calls[method][CodeName(code)];
}

void Recorder::AddMalformed(const std::string& description) {
  std::lock_guard<std::mutex> lock(mu_);
  ++recording_.malformed[description];
}

void Recorder::AddOutput(const std::string& prompt, std::string text) {
  std::lock_guard<std::mutex> lock(mu_);
  recording_.outputs[prompt].insert(std::move(text));
}

void Recorder::Counts(int64_t* done, int64_t* failed) const {
  std::lock_guard<std::mutex> lock(mu_);
  *done = static_cast<int64_t>(recording_.requests.size());
  *failed = failed_;
}

Recording Recorder::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  failed_ = 0;
  return std::exchange(recording_, Recording());
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

Report Summarize(Recording recording, double duration_s) {
  Report r;
  r.duration_s = duration_s;
  r.calls = std::move(recording.session_calls);
  r.malformed = std::move(recording.malformed);
  r.outputs = std::move(recording.outputs);
  std::vector<double> ttft, itl, e2e;
  for (const RequestResult& x : recording.requests) {
    ++r.total;
    ++r.calls["GenerateStream"][CodeName(x.code)];
    r.output_tokens += x.output_tokens;
    r.stream_messages += x.messages;
    if (x.code != absl::StatusCode::kOk) {
      ++r.failed;
      ++r.errors_by_code[CodeName(x.code)];
      continue;
    }
    ++r.ok;
    r.prompt_tokens += x.prompt_tokens;
    r.cached_tokens_local += x.cached_tokens_local;
    r.cached_tokens_remote += x.cached_tokens_remote;
    r.draft_tokens += x.draft_tokens;
    r.draft_tokens_accepted += x.draft_tokens_accepted;
    if (x.turn > 0) {
      ++r.later_turns;
      if (x.cached_tokens_local + x.cached_tokens_remote > 0) ++r.later_turns_cached;
    }
    if (x.ttft_s >= 0) ttft.push_back(x.ttft_s);
    itl.insert(itl.end(), x.itl_s.begin(), x.itl_s.end());
    e2e.push_back(x.e2e_s);
  }
  for (const auto& [method, codes] : r.calls) {
    for (const auto& [code, n] : codes) {
      if (code != "OK") r.failed_calls += n;
    }
  }
  if (duration_s > 0) {
    r.output_tokens_per_s = static_cast<double>(r.output_tokens) / duration_s;
    r.requests_per_s = static_cast<double>(r.ok) / duration_s;
  }
  if (r.draft_tokens > 0) {
    r.draft_acceptance =
        static_cast<double>(r.draft_tokens_accepted) / static_cast<double>(r.draft_tokens);
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
  const auto count = [](int64_t n) { return absl::StrCat(n); };
  std::string outputs;
  if (!r.outputs.empty()) {
    outputs = absl::StrCat(",\"outputs\":", JsonObject(r.outputs, [](const auto& texts) {
                             std::string list;
                             for (const std::string& t : texts) {
                               absl::StrAppend(&list, list.empty() ? "" : ",", JsonString(t));
                             }
                             return absl::StrCat("[", list, "]");
                           }));
  }
  return absl::StrCat(
      "{\"requests\":{\"total\":", r.total, ",\"ok\":", r.ok, ",\"failed\":", r.failed,
      "},\"errors_by_code\":", JsonObject(r.errors_by_code, count), ",\"calls\":",
      JsonObject(r.calls, [&](const auto& codes) { return JsonObject(codes, count); }),
      ",\"failed_calls\":", r.failed_calls, ",\"malformed\":", JsonObject(r.malformed, count), ",",
      absl::StrFormat("\"duration_s\":%.4f,", r.duration_s),
      "\"tokens\":{\"prompt\":", r.prompt_tokens, ",\"cached_local\":", r.cached_tokens_local,
      ",\"cached_remote\":", r.cached_tokens_remote, ",\"output\":", r.output_tokens,
      ",\"draft\":", r.draft_tokens, ",\"draft_accepted\":", r.draft_tokens_accepted,
      "},\"stream_messages\":", r.stream_messages, ",",
      absl::StrFormat("\"output_tokens_per_s\":%.2f,\"requests_per_s\":%.3f,"
                      "\"cache_hit_ratio\":%.4f,",
                      r.output_tokens_per_s, r.requests_per_s, r.cache_hit_ratio),
      "\"later_turns\":{\"total\":", r.later_turns, ",\"cached\":", r.later_turns_cached,
      "},\"ttft_ms\":", PercentilesJson(r.ttft), ",\"itl_ms\":", PercentilesJson(r.itl),
      ",\"e2e_ms\":", PercentilesJson(r.e2e), outputs, ",\"config\":", config_json, "}");
}

namespace {

// "title k=v k=v\n" of a flat map, "" when empty.
std::string TextLine(std::string_view title, const std::map<std::string, int64_t>& map) {
  if (map.empty()) return "";
  std::string line(title);
  for (const auto& [key, n] : map) absl::StrAppend(&line, " ", key, "=", n);
  return line + "\n";
}

// "title method code=n ..., method ...\n" of call counts.
std::string TextLine(std::string_view title, const CallCounts& calls) {
  std::string line(title);
  for (const auto& [method, codes] : calls) {
    absl::StrAppend(&line, line.size() > title.size() ? ";" : "", " ", method);
    for (const auto& [code, n] : codes) absl::StrAppend(&line, " ", code, "=", n);
  }
  return line.size() > title.size() ? line + "\n" : "";
}

}  // namespace

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
      r.draft_tokens > 0
          ? absl::StrFormat("speculative drafts: %d checked, %d accepted (acceptance %.3f)\n",
                            r.draft_tokens, r.draft_tokens_accepted, r.draft_acceptance)
          : "",
      absl::StrFormat("ttft ms: p50 %.2f p90 %.2f p99 %.2f mean %.2f\n", r.ttft.p50, r.ttft.p90,
                      r.ttft.p99, r.ttft.mean),
      absl::StrFormat("itl ms:  p50 %.2f p90 %.2f p99 %.2f mean %.2f\n", r.itl.p50, r.itl.p90,
                      r.itl.p99, r.itl.mean),
      absl::StrFormat("e2e ms:  p50 %.2f p90 %.2f p99 %.2f mean %.2f\n", r.e2e.p50, r.e2e.p90,
                      r.e2e.p99, r.e2e.mean),
      r.later_turns > 0 ? absl::StrFormat("later turns: %d, %d with cached tokens\n", r.later_turns,
                                          r.later_turns_cached)
                        : "",
      TextLine("calls:", r.calls), TextLine("malformed answers:", r.malformed));
}

}  // namespace kvserve::client::bench
