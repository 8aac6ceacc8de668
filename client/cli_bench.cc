// kvserve-cli bench: worker threads take units of work (client/bench_workload.h), stream
// their requests and record what they saw (client/bench_report.h).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/bench_report.h"
#include "client/cli_commands.h"

namespace kvserve::client::cli {
namespace {

using bench::RequestResult;

// Streams one request and measures it.
RequestResult Measure(const Client& client, const v1::GenerateRequest& request) {
  RequestResult r;
  const absl::Time sent = absl::Now();
  absl::Time last_token = sent;
  std::unique_ptr<GenerateStream> stream = client.StartGenerateStream(request);
  v1::GenerateStreamResponse m;
  while (stream->Next(&m)) {
    const int k = m.token_ids_size();
    if (k > 0) {
      const absl::Time now = absl::Now();
      if (r.ttft_s < 0) {
        // Tokens that came with the first one have no gap of their own to measure.
        r.ttft_s = absl::ToDoubleSeconds(now - sent);
      } else {
        const double gap = absl::ToDoubleSeconds(now - last_token) / k;
        for (int i = 0; i < k; ++i) r.itl_s.push_back(gap);
      }
      last_token = now;
      r.output_tokens += k;
    }
    if (m.has_usage()) {
      r.prompt_tokens = m.usage().prompt_tokens();
      r.cached_tokens_local = m.usage().cached_tokens_local();
      r.cached_tokens_remote = m.usage().cached_tokens_remote();
    }
  }
  r.code = stream->Finish().code();
  r.e2e_s = absl::ToDoubleSeconds(absl::Now() - sent);
  return r;
}

// Runs one unit: a request, or a conversation in a session of its own.
void RunUnit(const Client& client, const BenchOptions& o, const bench::Unit& unit,
             bench::Recorder& recorder) {
  v1::GenerateRequest request = o.request;
  std::string session_id;
  if (o.workload.shape == "conversation") {
    absl::StatusOr<v1::Session> session = client.OpenSession();
    if (!session.ok()) {
      RequestResult failed;
      failed.code = session.status().code();
      recorder.Add(failed);
      return;
    }
    session_id = session->session_id();
  }
  for (int turn = 0; turn < unit.turns; ++turn) {
    request.set_text(bench::TurnText(o.workload, unit.index, turn));
    request.set_session_id(session_id);
    recorder.Add(Measure(client, request));
  }
  if (!session_id.empty()) client.CloseSession(session_id).IgnoreError();
}

// Redraws "[=====     ] done/total" on stderr until `finished`.
class ProgressBar {
 public:
  ProgressBar(const bench::Recorder& recorder, const BenchOptions& o, absl::Time start)
      : recorder_(recorder), o_(o), start_(start), thread_([this] { Loop(); }) {}
  ~ProgressBar() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
    }
    cv_.notify_all();
    thread_.join();
    std::fprintf(stderr, "\r%80s\r", "");
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return finished_; })) {
      int64_t done = 0, failed = 0;
      recorder_.Counts(&done, &failed);
      double fraction = 0;
      if (o_.workload.requests > 0) {
        fraction = static_cast<double>(done) / static_cast<double>(o_.workload.requests);
      }
      if (o_.workload.duration > absl::ZeroDuration()) {
        fraction =
            std::max(fraction, absl::FDivDuration(absl::Now() - start_, o_.workload.duration));
      }
      const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 30);
      std::fprintf(stderr, "\r[%s%s] %lld requests, %lld failed, %.0f s",
                   std::string(filled, '=').c_str(), std::string(30 - filled, ' ').c_str(),
                   static_cast<long long>(done), static_cast<long long>(failed),
                   absl::ToDoubleSeconds(absl::Now() - start_));
      std::fflush(stderr);
    }
  }

  const bench::Recorder& recorder_;
  const BenchOptions& o_;
  const absl::Time start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  std::thread thread_;
};

std::string ConfigJson(const BenchOptions& o, const Client& client) {
  return absl::StrFormat(
      R"({"shape":"%s","concurrency":%d,"requests":%d,"duration_s":%.3f,"request_rate":%.3f,)"
      R"("turns":%d,"max_tokens":%d,"replicas":%d,"seed":%d})",
      o.workload.shape, o.concurrency, o.workload.requests,
      absl::ToDoubleSeconds(o.workload.duration), o.workload.request_rate, o.workload.turns,
      o.request.max_tokens(), client.targets().size(), o.workload.seed);
}

}  // namespace

int RunBench(const Client& client, const BenchOptions& o) {
  if (absl::Status s = bench::ValidateWorkload(o.workload); !s.ok()) {
    std::fprintf(stderr, "kvserve-cli: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (o.concurrency < 1) {
    std::fprintf(stderr, "kvserve-cli: --concurrency must be >= 1\n");
    return 2;
  }
  for (int i = 0; i < o.warmup; ++i) {
    v1::GenerateRequest warm = o.request;
    warm.set_text(o.workload.prompt);
    if (RequestResult r = Measure(client, warm); r.code != absl::StatusCode::kOk) {
      return Fail(absl::Status(r.code, "warm-up request failed"));
    }
  }
  bench::Recorder recorder;
  const absl::Time start = absl::Now();
  bench::UnitSource source(o.workload, start);
  {
    std::unique_ptr<ProgressBar> progress;
    if (isatty(STDERR_FILENO)) progress = std::make_unique<ProgressBar>(recorder, o, start);
    std::vector<std::thread> workers;
    for (int w = 0; w < o.concurrency; ++w) {
      workers.emplace_back([&] {
        while (std::optional<bench::Unit> unit = source.Take()) {
          const absl::Time now = absl::Now();
          if (unit->arrival > now) absl::SleepFor(unit->arrival - now);
          RunUnit(client, o, *unit, recorder);
        }
      });
    }
    for (std::thread& t : workers) t.join();
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const bench::Report report = bench::Summarize(recorder.Take(), seconds);
  if (o.json) {
    std::printf("%s\n", bench::ToJson(report, ConfigJson(o, client)).c_str());
  } else {
    std::printf("%s", bench::ToText(report).c_str());
  }
  return report.failed == 0 ? 0 : 3;
}

}  // namespace kvserve::client::cli
