// kvserve-cli bench: the load generator (client/load_generator.h) with a progress bar, a
// call log, early stop on a signal, and the report on stdout.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/bench_report.h"
#include "client/cli_commands.h"
#include "client/openai_stream.h"

namespace kvserve::client::cli {
namespace {

sigset_t StopSignalSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Redraws "[=====     ] done/total" on stderr until destroyed.
class ProgressBar {
 public:
  ProgressBar(const bench::LoadGenerator& load, absl::Time start)
      : load_(load), start_(start), thread_([this] { Loop(); }) {}
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
    const bench::WorkloadOptions& w = load_.options().workload;
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return finished_; })) {
      int64_t done = 0, failed = 0;
      load_.Counts(&done, &failed);
      double fraction = 0;
      if (w.requests > 0) {
        fraction = static_cast<double>(done) / static_cast<double>(w.requests);
      }
      if (w.duration > absl::ZeroDuration()) {
        fraction = std::max(fraction, absl::FDivDuration(absl::Now() - start_, w.duration));
      }
      const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 30);
      std::fprintf(stderr, "\r[%s%s] %lld requests, %lld failed, %.0f s",
                   std::string(filled, '=').c_str(), std::string(30 - filled, ' ').c_str(),
                   static_cast<long long>(done), static_cast<long long>(failed),
                   absl::ToDoubleSeconds(absl::Now() - start_));
      std::fflush(stderr);
    }
  }

  const bench::LoadGenerator& load_;
  const absl::Time start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  std::thread thread_;
};

// Writes one JSON line per call (BenchOptions::call_log). Thread-safe.
class CallLog {
 public:
  explicit CallLog(const std::string& path) : out_(path, std::ios::trunc) {}
  bool ok() const { return out_.good(); }
  void Write(std::string_view method, const absl::Status& status) {
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    const std::string line = absl::StrFormat(
        "{\"t\":%.6f,\"method\":%s,\"code\":%s,\"message\":%s}\n", t, bench::JsonString(method),
        bench::JsonString(bench::CodeName(status.code())),
        bench::JsonString(std::string(status.message())));
    std::lock_guard<std::mutex> lock(mu_);
    out_ << line << std::flush;
  }

 private:
  std::mutex mu_;
  std::ofstream out_;
};

absl::StatusOr<std::vector<std::string>> ReadPrompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--prompts-file: cannot read ", path));
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) prompts.push_back(line);
  }
  if (prompts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--prompts-file: ", path, " has no prompt"));
  }
  return prompts;
}

std::string ConfigJson(const bench::LoadOptions& o, const BenchOptions& options,
                       const Client& client) {
  const std::string endpoint =
      options.protocol == "http" ? std::string(bench::HttpEndpointPath(options.http.endpoint)) : "";
  return absl::StrFormat(
      R"({"shape":"%s","concurrency":%d,"requests":%d,"duration_s":%.3f,"request_rate":%.3f,)"
      R"("turns":%d,"max_tokens":%d,"max_tokens_min":%d,"prompts":%d,)"
      R"("cancel_after_tokens":%d,"replicas":%d,"seed":%d,"protocol":%s,"http_endpoint":%s,)"
      R"("as_messages":%s})",
      o.workload.shape, o.concurrency, o.workload.requests,
      absl::ToDoubleSeconds(o.workload.duration), o.workload.request_rate, o.workload.turns,
      o.request.max_tokens(), o.max_tokens_min, o.workload.prompts.size(), o.cancel_after_tokens,
      client.targets().size(), o.workload.seed, bench::JsonString(options.protocol),
      bench::JsonString(endpoint), o.as_messages ? "true" : "false");
}

int BadOptions(const absl::Status& status) {
  std::fprintf(stderr, "kvserve-cli: %s\n", std::string(status.message()).c_str());
  return 2;
}

}  // namespace

StopSignals::StopSignals() {
  const sigset_t set = StopSignalSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

StopSignals::~StopSignals() { StopWatching(); }

void StopSignals::StopWatching() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  done_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StopSignals::Watch(std::function<void()> on_signal) {
  thread_ = std::thread([this, on_signal = std::move(on_signal)] {
    const sigset_t set = StopSignalSet();
    const timespec poll = {0, 100 * 1000 * 1000};
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (done_) return;
      }
      if (sigtimedwait(&set, nullptr, &poll) > 0) break;
    }
    on_signal();
    // A second signal is delivered here, to the only thread not blocking it: the
    // default action ends the process.
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return done_; });
  });
}

int RunBench(const Client& client, const BenchOptions& options, StopSignals* stop) {
  bench::LoadOptions o = options.load;
  if (!options.prompts_file.empty()) {
    absl::StatusOr<std::vector<std::string>> prompts = ReadPrompts(options.prompts_file);
    if (!prompts.ok()) return BadOptions(prompts.status());
    o.workload.prompts = *std::move(prompts);
  }
  std::unique_ptr<CallLog> log;
  if (!options.call_log.empty()) {
    log = std::make_unique<CallLog>(options.call_log);
    if (!log->ok()) {
      return BadOptions(
          absl::InvalidArgumentError(absl::StrCat("--call-log: cannot write ", options.call_log)));
    }
    o.on_call = [&log](std::string_view method, const absl::Status& s) { log->Write(method, s); };
  }
  std::unique_ptr<bench::HttpStreamSource> http;
  if (options.protocol == "http") {
    absl::StatusOr<std::unique_ptr<bench::HttpStreamSource>> source =
        bench::HttpStreamSource::Create(options.http);
    if (!source.ok()) return Fail(source.status());
    http = *std::move(source);
    o.streams = http.get();
  } else if (options.protocol != "grpc") {
    return BadOptions(absl::InvalidArgumentError(
        absl::StrCat("--protocol must be grpc or http, not \"", options.protocol, "\"")));
  }
  absl::StatusOr<std::unique_ptr<bench::LoadGenerator>> load =
      bench::LoadGenerator::Create(client, std::move(o));
  if (!load.ok()) return BadOptions(load.status());
  if (stop != nullptr) stop->Watch([&load] { (*load)->Stop(); });
  absl::StatusOr<bench::Report> report;
  {
    std::unique_ptr<ProgressBar> progress;
    if (isatty(STDERR_FILENO)) progress = std::make_unique<ProgressBar>(**load, absl::Now());
    report = (*load)->Run();
  }
  if (stop != nullptr) stop->StopWatching();  // before `load` goes
  if (!report.ok()) return Fail(report.status());
  if (options.json) {
    std::printf("%s\n",
                bench::ToJson(*report, ConfigJson((*load)->options(), options, client)).c_str());
  } else {
    std::printf("%s", bench::ToText(*report).c_str());
  }
  return report->failed_calls == 0 ? 0 : 3;
}

}  // namespace kvserve::client::cli
