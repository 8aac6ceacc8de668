// kvserve-cli's flags, all defined here (the file --help lists), and their mapping onto
// the client's and the commands' options.
#include "client/cli_flags.h"

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/openai_stream.h"
#include "server/tls_credentials.h"

// Connection.
ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "Server address HOST:PORT, or several separated by commas: session calls then go to "
          "the replica that owns the session id on a consistent-hash ring (and move when it "
          "is down), other calls rotate.");
ABSL_FLAG(std::string, tls_ca, "",
          "TLS: PEM CA file the server's certificate must chain to (its SAN must name the "
          "target host); empty = plaintext.");
ABSL_FLAG(std::string, tls_cert, "",
          "Mutual TLS: PEM client certificate (with --tls-key and --tls-ca).");
ABSL_FLAG(std::string, tls_key, "", "Mutual TLS: PEM key of --tls-cert (unencrypted).");
ABSL_FLAG(std::string, token_file, "",
          "File whose first line is the bearer token to send (\"authorization: Bearer "
          "TOKEN\", for a server started with --auth-tokens); empty = none.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(120), "Deadline of each call, retries included.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(5),
          "How long to wait for a first replica to be reachable.");
ABSL_FLAG(int32_t, max_attempts, 4,
          "Attempts per call (1 = no retry): UNAVAILABLE is retried with exponential backoff "
          "and jitter (on another replica when there is one), RESOURCE_EXHAUSTED after the "
          "server's retry hint; a retry budget stops retries while most calls fail.");
// Requests.
ABSL_FLAG(std::string, prompt, "Once upon a time", "generate/tokenize/bench: the prompt text.");
ABSL_FLAG(int32_t, max_tokens, 64, "Completion tokens per request.");
ABSL_FLAG(float, temperature, 0.0f, "Sampling temperature; 0 = greedy.");
ABSL_FLAG(int32_t, top_k, 0, "Top-k; 0 = off.");
ABSL_FLAG(float, top_p, 1.0f, "Top-p in (0, 1]; 1 = off.");
ABSL_FLAG(int64_t, seed, -1, "Sampling seed; -1 = server-chosen.");
ABSL_FLAG(bool, stream, false, "generate: stream the text as it is produced.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating past end-of-sequence (benchmarks).");
ABSL_FLAG(std::string, system, "",
          "chat: system message opening each conversation (only when the model has a chat "
          "template); empty = none.");
ABSL_FLAG(bool, add_bos, false, "tokenize: prepend the BOS token.");
ABSL_FLAG(absl::Duration, ttl, absl::ZeroDuration(),
          "chat/sessions: idle time after which a new session expires; 0 = the server's "
          "default.");
// bench.
ABSL_FLAG(int32_t, concurrency, 4, "bench: requests (or conversations) in flight at once.");
ABSL_FLAG(int64_t, requests, 16,
          "bench: requests to send in all (turns count one each); 0 = until --duration.");
ABSL_FLAG(absl::Duration, duration, absl::ZeroDuration(),
          "bench: stop starting requests after this long (e.g. 60s); 0 = until --requests.");
ABSL_FLAG(double, request_rate, 0,
          "bench: start requests (or conversations) at this rate per second with Poisson "
          "arrivals, at most --concurrency at once; 0 = closed loop (each worker sends its next "
          "request when the previous one ended).");
ABSL_FLAG(std::string, shape, "single",
          "bench: single (every request is --prompt) or conversation (sessions of --turns "
          "turns over a shared --system-prompt).");
ABSL_FLAG(int32_t, turns, 3, "bench --shape conversation: turns per conversation.");
ABSL_FLAG(std::string, system_prompt,
          "You are a storyteller. You tell short, happy stories about children and animals.",
          "bench --shape conversation: the first turn's shared prefix.");
ABSL_FLAG(int32_t, warmup, 1, "bench: requests sent and not measured before the run.");
ABSL_FLAG(int64_t, arrival_seed, 1, "bench: seed of the Poisson arrival times.");
ABSL_FLAG(std::string, prompts_file, "",
          "bench: file of prompts, one a line; each request (or conversation's first turn) "
          "draws one at random (seeded by --arrival-seed) instead of --prompt (or "
          "--system-prompt and a user line); empty = none.");
ABSL_FLAG(int32_t, max_tokens_min, 0,
          "bench: when > 0, each request's max tokens is drawn at random from "
          "[--max-tokens-min, --max-tokens]; 0 = --max-tokens for all.");
ABSL_FLAG(int32_t, cancel_after_tokens, 0,
          "bench: cancel each stream once it has received this many tokens (counted "
          "CANCELLED); 0 = never.");
ABSL_FLAG(absl::Duration, pause_after_failure, absl::ZeroDuration(),
          "bench: after a call fails UNAVAILABLE or RESOURCE_EXHAUSTED its worker waits this "
          "long before its next call (as a retrying client backs off; use with "
          "--max-attempts 1); 0 = none.");
ABSL_FLAG(bool, record_outputs, false,
          "bench --json: add \"outputs\", the distinct output texts of greedy requests "
          "without history (single, or a conversation's first turn) per prompt.");
ABSL_FLAG(std::string, call_log, "",
          "bench: file to write one JSON line to as each call ends: {\"t\": end on "
          "CLOCK_MONOTONIC in seconds, \"method\", \"code\", \"message\"}; empty = none.");
ABSL_FLAG(bool, json, false, "bench: print the report as one JSON object.");
ABSL_FLAG(bool, as_messages, false,
          "bench: send each prompt as one user message (rendered by the server's chat "
          "template) instead of text. --protocol http with --http-endpoint chat always sends "
          "messages (a text prompt becomes one user message): set it for gRPC to run the "
          "same prompt.");
ABSL_FLAG(std::string, protocol, "grpc",
          "bench: grpc (GenerateStream at --target) or http (kvserve's OpenAI-compatible API "
          "at --http-target, streamed; --target still serves the session calls and must be "
          "reachable).");
ABSL_FLAG(std::string, http_target, "127.0.0.1:8080",
          "bench --protocol http: the server's HTTP listener HOST:PORT (HTTPS with --tls-ca, "
          "and the client certificate of --tls-cert/--tls-key).");
ABSL_FLAG(std::string, http_endpoint, "chat",
          "bench --protocol http: chat (POST /v1/chat/completions) or completions (POST "
          "/v1/completions: text prompts).");
ABSL_FLAG(std::string, http_model, "",
          "bench --protocol http: the model every request names; empty = the first model "
          "GET /v1/models lists.");

namespace kvserve::client::cli {

namespace {

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--token-file: cannot read ", path));
  std::string token;
  std::getline(in, token);
  token = std::string(absl::StripAsciiWhitespace(token));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token-file: ", path, " has no token on its first line"));
  }
  return token;
}

}  // namespace

absl::StatusOr<Client::Options> ClientOptionsFromFlags() {
  Client::Options options;
  options.timeout = absl::GetFlag(FLAGS_timeout);
  options.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  options.retry.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      server::MakeChannelCredentials({.ca_file = absl::GetFlag(FLAGS_tls_ca),
                                      .cert_file = absl::GetFlag(FLAGS_tls_cert),
                                      .key_file = absl::GetFlag(FLAGS_tls_key)});
  if (!credentials.ok()) return credentials.status();
  options.credentials = *std::move(credentials);
  if (const std::string file = absl::GetFlag(FLAGS_token_file); !file.empty()) {
    absl::StatusOr<std::string> token = ReadToken(file);
    if (!token.ok()) return token.status();
    options.bearer_token = *std::move(token);
  }
  return options;
}

v1::GenerateRequest RequestFromFlags() {
  v1::GenerateRequest request;
  request.set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  request.set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  v1::SamplingParams* s = request.mutable_sampling();
  s->set_temperature(absl::GetFlag(FLAGS_temperature));
  s->set_top_k(absl::GetFlag(FLAGS_top_k));
  s->set_top_p(absl::GetFlag(FLAGS_top_p));
  if (absl::GetFlag(FLAGS_seed) >= 0) s->set_seed(static_cast<uint64_t>(absl::GetFlag(FLAGS_seed)));
  return request;
}

absl::StatusOr<BenchOptions> BenchOptionsFromFlags(const Client::Options& client) {
  BenchOptions o;
  o.protocol = absl::GetFlag(FLAGS_protocol);
  o.http.target = absl::GetFlag(FLAGS_http_target);
  absl::StatusOr<bench::HttpEndpoint> endpoint =
      bench::ParseHttpEndpoint(absl::GetFlag(FLAGS_http_endpoint));
  if (!endpoint.ok()) return endpoint.status();
  o.http.endpoint = *endpoint;
  o.http.model = absl::GetFlag(FLAGS_http_model);
  o.http.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  o.http.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  o.http.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  o.http.bearer_token = client.bearer_token;
  o.http.timeout = client.timeout;
  o.http.connect_timeout = client.connect_timeout;
  o.load.as_messages = absl::GetFlag(FLAGS_as_messages);
  bench::WorkloadOptions& w = o.load.workload;
  w.shape = absl::GetFlag(FLAGS_shape);
  w.prompt = absl::GetFlag(FLAGS_prompt);
  w.system_prompt = absl::GetFlag(FLAGS_system_prompt);
  w.turns = absl::GetFlag(FLAGS_turns);
  w.requests = absl::GetFlag(FLAGS_requests);
  w.duration = absl::GetFlag(FLAGS_duration);
  w.request_rate = absl::GetFlag(FLAGS_request_rate);
  w.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_arrival_seed));
  o.load.request = RequestFromFlags();
  o.load.max_tokens_min = absl::GetFlag(FLAGS_max_tokens_min);
  o.load.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.load.warmup = absl::GetFlag(FLAGS_warmup);
  o.load.cancel_after_tokens = absl::GetFlag(FLAGS_cancel_after_tokens);
  o.load.pause_after_failure = absl::GetFlag(FLAGS_pause_after_failure);
  o.load.record_outputs = absl::GetFlag(FLAGS_record_outputs);
  o.prompts_file = absl::GetFlag(FLAGS_prompts_file);
  o.call_log = absl::GetFlag(FLAGS_call_log);
  o.json = absl::GetFlag(FLAGS_json);
  return o;
}

std::vector<std::string> TargetsFromFlags() {
  return absl::StrSplit(absl::GetFlag(FLAGS_target), ',', absl::SkipWhitespace());
}

}  // namespace kvserve::client::cli
