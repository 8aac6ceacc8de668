// kvserve's load generator: worker threads take units of work (client/bench_workload.h:
// single requests or multi-turn conversations in sessions; closed loop or Poisson
// arrivals; a count or a duration), stream their requests (client/stream_source.h:
// GenerateStream through a Client, or the OpenAI-compatible HTTP API) and record
// what they saw (client/bench_report.h): latencies on the client's clock (time to first
// token, gaps between tokens, end to end), tokens and stream messages, every call by
// method and status code, answers that break the protocol, and optionally the greedy
// outputs per prompt.
//
// kvserve-cli bench runs it (client/cli_bench.cc), and through kvserve-cli so do the
// end-to-end load tests (tests/load_soak_test.py, tests/fault_matrix_test.py). A
// benchmark can run it on a Client of its own server:
//
//   Client::Options co;
//   co.retry.max_attempts = 1;  // measure the server, not the client's retries
//   absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect("127.0.0.1:PORT", co);
//   LoadOptions o;
//   o.request.mutable_tokens()->mutable_ids()->Add(...);  // or leave the prompt to o.workload
//   o.request.set_max_tokens(256);
//   o.workload.requests = 64;
//   o.concurrency = 4;
//   absl::StatusOr<Report> report = RunLoad(**client, o);  // report->output_tokens_per_s, ...
//
// (LoadGenerator itself when the run must be stoppable or watched: Stop(), Counts().)
// The same load over HTTP: an HttpStreamSource (client/http_stream_source.h) as
// o.streams; sessions (shape "conversation") are still opened and closed through the
// Client, and their turns go over HTTP with session_id.
//
// A call's answer is malformed (Report::malformed) when a stream ends OK without usage,
// or a call fails RESOURCE_EXHAUSTED without both retry hints (gRPC: trailers
// "grpc-retry-pushback-ms" and "retry-after", docs/design.md; HTTP: header Retry-After).
//
// Threading: Run() blocks, once per generator; Stop() and Counts() from any thread. The
// Client must outlive the generator.
#ifndef KVSERVE_CLIENT_LOAD_GENERATOR_H_
#define KVSERVE_CLIENT_LOAD_GENERATOR_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/bench_report.h"
#include "client/bench_workload.h"
#include "client/client.h"
#include "client/stream_source.h"
#include "kvserve/v1/inference.pb.h"

namespace kvserve::client::bench {

struct LoadOptions {
  // What to send and when (shape, prompts, count or duration, request rate).
  WorkloadOptions workload;
  // Sampling and limits of every request; the session id is set per request. Its prompt,
  // when set (text, tokens or messages), is what shape "single" sends (workload.prompt
  // and workload.prompts are then unused); else each request's text comes from the
  // workload (TurnText).
  v1::GenerateRequest request;
  // When > 0, each request's max_tokens is drawn uniformly (from Unit::seed) from
  // [max_tokens_min, request.max_tokens()]; 0 = request.max_tokens() for all. Default 0.
  int max_tokens_min = 0;
  // Where the requests go; null = GenerateStream through the generator's Client. Must
  // outlive the generator. Default null.
  const StreamSource* streams = nullptr;
  // Send the text of each request the workload makes (not a prompt set in `request`) as
  // one user message (GenerateRequest.messages: the server renders it with its chat
  // template) instead of text. Default false.
  bool as_messages = false;
  // Units in flight at once (worker threads), >= 1. Default 4.
  int concurrency = 4;
  // Requests sent one after another before the run, not recorded (lazy initialization);
  // the first that fails ends Run with its status. Default 1.
  int warmup = 1;
  // Cancel each stream once it has received this many tokens (a client that leaves);
  // such a request is recorded as CANCELLED. 0 = never. Default 0.
  int cancel_after_tokens = 0;
  // After a call ends UNAVAILABLE or RESOURCE_EXHAUSTED its worker waits this long
  // before its next call, as a retrying client backs off (with the Client's retries off,
  // a closed loop would otherwise measure how fast it can fail). Default 0.
  absl::Duration pause_after_failure = absl::ZeroDuration();
  // Record the distinct output texts of greedy requests (temperature 0) that start from
  // no history (shape "single", and a conversation's first turn), per prompt text
  // (Report::outputs): with a fixed batch-invariant model they are all prefixes of the
  // longest. Memory grows with the distinct outputs. Default false.
  bool record_outputs = false;
  // Called on a worker's thread as each call ends (requests as "GenerateStream" whatever
  // the protocol, and
  // "OpenSession", "CloseSession"), before the worker goes on; e.g. to log calls.
  // Must be thread-safe. Default none.
  std::function<void(std::string_view method, const absl::Status& status)> on_call;
};

class LoadGenerator {
 public:
  // INVALID_ARGUMENT naming the option when `options` cannot run.
  static absl::StatusOr<std::unique_ptr<LoadGenerator>> Create(const Client& client,
                                                               LoadOptions options);

  // Sends the warm-up, then runs the load until the workload's count or duration is used
  // up (or Stop()); returns when every unit started has ended, with the report. The
  // warm-up's failure is returned as an error (nothing is measured). Call once.
  absl::StatusOr<Report> Run();

  // Ends the run early: no unit starts after it (workers waiting for an arrival time or
  // a pause stop waiting); units in flight end normally. Idempotent.
  void Stop();

  // Requests recorded so far, and how many failed (for a progress bar).
  void Counts(int64_t* done, int64_t* failed) const { recorder_.Counts(done, failed); }

  const LoadOptions& options() const { return options_; }

 private:
  LoadGenerator(const Client& client, LoadOptions options)
      : client_(client),
        options_(std::move(options)),
        grpc_streams_(client),
        streams_(options_.streams != nullptr ? options_.streams : &grpc_streams_) {}

  // Runs one unit: a request, or a conversation in a session of its own (ended by its
  // first failed turn: a later turn would continue another history).
  void RunUnit(const Unit& unit);
  // options_.request with prompt `text`: as text, or as one user message (as_messages).
  v1::GenerateRequest RequestWithText(const std::string& text) const;
  // Streams `request`, measures and records it (and its output text, under prompt
  // *record_output_of when that is not null); returns its status code.
  absl::StatusCode Measure(const v1::GenerateRequest& request, int turn,
                           const std::string* record_output_of);
  // A call ended: malformed check, on_call, and the pause after a retryable failure.
  void Ended(std::string_view method, const absl::Status& status, const CallInfo& info);
  // Sleeps until `until` or Stop(); false when stopped.
  bool WaitUntil(absl::Time until);

  const Client& client_;
  const LoadOptions options_;
  const GrpcStreamSource grpc_streams_;
  const StreamSource* const streams_;  // options_.streams or grpc_streams_
  Recorder recorder_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// Create and Run in one: the report of a run that nobody stops.
absl::StatusOr<Report> RunLoad(const Client& client, LoadOptions options);

}  // namespace kvserve::client::bench

#endif  // KVSERVE_CLIENT_LOAD_GENERATOR_H_
