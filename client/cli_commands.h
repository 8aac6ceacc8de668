// The commands of kvserve-cli, one function each (the flags, client/cli_flags.h, are
// mapped onto their arguments in cli_main.cc; no command reads a flag). Each returns the
// process exit code: 0 success, 1 a failed call (its status printed on stderr), 2 bad
// usage.
#ifndef KVSERVE_CLIENT_CLI_COMMANDS_H_
#define KVSERVE_CLIENT_CLI_COMMANDS_H_

#include <condition_variable>
#include <cstdio>
#include <functional>
#include <istream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/http_stream_source.h"
#include "client/load_generator.h"
#include "kvserve/v1/inference.pb.h"

namespace kvserve::client::cli {

// Prints "kvserve-cli: STATUS" on stderr; returns 1.
int Fail(const absl::Status& status);

// One line on `out`: "[FINISH_REASON] prompt P (cached local L, remote R, computed C),
// completion N; queue Q ms, ttft T ms, total E ms" (server-side times).
void PrintUsage(std::FILE* out, const v1::Usage& usage, v1::FinishReason reason);

// generate: `request` (prompt and sampling set) unary, or streamed to stdout as produced.
// The prompt and completion go to stdout, the usage line to stderr.
int RunGenerate(const Client& client, const v1::GenerateRequest& request, bool stream);

// tokenize: prints the token ids of `text`, space-separated, then their count on stderr.
int RunTokenize(const Client& client, const std::string& text, bool add_bos);

// info: the model and the server's limits, one "key: value" a line.
int RunInfo(const Client& client);

// sessions open | get ID | fork ID | close ID: one session call; prints the session
// ("id history_tokens expire_time busy") on stdout.
int RunSessions(const Client& client, const std::vector<std::string>& args, absl::Duration ttl);

// chat: one session; each line of `in` is a turn (sent with `turn`'s sampling and
// limits), streamed to stdout; after each turn a usage line on stderr, with the client's
// time to first token. Lines starting with '/' are commands: /fork (continue in a fork of
// the session), /reset (close it, open a new one), /close (close it and end), /help.
// When the model has a chat template (ModelInfo.chat_template), each line goes as a user
// message (the server renders it) and a non-empty `system` opens each new conversation as
// a system message; else lines are sent as text. The session is closed at the end of input.
int RunChat(const Client& client, const v1::GenerateRequest& turn, absl::Duration ttl,
            const std::string& system, std::istream& in);

struct BenchOptions {
  // The load (client/load_generator.h); its on_call and streams are set by RunBench.
  bench::LoadOptions load;
  // Where the requests go: "grpc" (GenerateStream through the Client) or "http" (the
  // OpenAI-compatible API at http.target, client/http_stream_source.h; sessions are still
  // opened and closed through the Client). Default "grpc".
  std::string protocol = "grpc";
  // The HTTP side (protocol "http").
  bench::HttpStreamSource::Options http;
  // A file of prompts, one a line (empty lines skipped), drawn from uniformly
  // (load.workload.prompts); empty = none. Default empty.
  std::string prompts_file;
  // A file to which a JSON line is written as each call ends:
  // {"t":T,"method":"GenerateStream","code":"OK","message":""}, T its end on the system's
  // monotonic clock in seconds (CLOCK_MONOTONIC: what Python's time.monotonic() reads).
  // Empty = none. Default empty.
  std::string call_log;
  // Print the report as one JSON object instead of text. Default false.
  bool json = false;
};

// SIGINT and SIGTERM as a request to stop a bench run early. The constructor blocks both
// in the calling thread, and so in every thread started after it: construct it before
// any other thread exists (gRPC starts its own when a client connects). Watch() takes
// them on a thread of its own; after the first, a second one ends the process as usual.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Calls `on_signal` (on the watching thread) at the first SIGINT or SIGTERM, until
  // StopWatching() or the destructor. Call once.
  void Watch(std::function<void()> on_signal);
  // Returns once `on_signal` can no longer be called (signals stay blocked). Idempotent.
  void StopWatching();

 private:
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// bench: runs the load generator (client/load_generator.h) and prints the report
// (client/bench_report.h) on stdout, a progress bar on stderr when it is a terminal.
// `stop` (optional, watched during the run): a signal ends the run early, and the
// report of what ran is printed. Exit code 0 when every call succeeded, 3 when some
// failed (the report is printed either way), 2 for bad options, 1 when the warm-up failed
// (or, over HTTP, the server's GET /v1/models).
int RunBench(const Client& client, const BenchOptions& options, StopSignals* stop = nullptr);

}  // namespace kvserve::client::cli

#endif  // KVSERVE_CLIENT_CLI_COMMANDS_H_
