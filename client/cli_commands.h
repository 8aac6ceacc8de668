// The commands of kvserve-cli, one function each (the flags are mapped onto their
// arguments in cli_main.cc, the only file that reads flags). Each returns the process exit
// code: 0 success, 1 a failed call (its status printed on stderr), 2 bad usage.
#ifndef KVSERVE_CLIENT_CLI_COMMANDS_H_
#define KVSERVE_CLIENT_CLI_COMMANDS_H_

#include <cstdio>
#include <istream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/bench_workload.h"
#include "client/client.h"
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
  // What to send and when (shape, count or duration, request rate).
  bench::WorkloadOptions workload;
  // Sampling and limits of every request (prompt and session are set per request).
  v1::GenerateRequest request;
  // Units in flight at once (worker threads), >= 1. Default 4.
  int concurrency = 4;
  // Requests sent and not measured before the run (lazy initialization). Default 1.
  int warmup = 1;
  // Print the report as one JSON object instead of text. Default false.
  bool json = false;
};

// bench: a load generator. Streams every request, measures on the client (TTFT, gaps
// between tokens, end to end) and reads usage (cached tokens) from the last message;
// prints the report (client/bench_report.h) on stdout, a progress bar on stderr when it
// is a terminal. Exit code 0 when every request succeeded, 3 when some failed (the
// report is printed either way), 2 for bad options.
int RunBench(const Client& client, const BenchOptions& options);

}  // namespace kvserve::client::cli

#endif  // KVSERVE_CLIENT_CLI_COMMANDS_H_
