// kvserve-cli: talk to a kvserve server.
//   kvserve-cli generate --prompt "Once upon a time" [--stream] [--max_tokens 64]
//   kvserve-cli chat [--system TEXT]      (one session; each stdin line is a turn)
//   kvserve-cli bench --streams 8 --requests 32 --max_tokens 128
//   kvserve-cli info
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "common/flags.h"
#include "common/stats.h"
#include "service/tls_credentials.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "Server address HOST:PORT.");
ABSL_FLAG(std::string, tls_ca, "",
          "TLS: PEM CA file the server's certificate must chain to (its SAN must name the "
          "target host); empty = plaintext.");
ABSL_FLAG(std::string, tls_cert, "",
          "Mutual TLS: PEM client certificate (with --tls-key and --tls-ca).");
ABSL_FLAG(std::string, tls_key, "", "Mutual TLS: PEM key of --tls-cert (unencrypted).");
ABSL_FLAG(std::string, prompt, "Once upon a time", "generate/bench: the prompt text.");
ABSL_FLAG(int32_t, max_tokens, 64, "Completion tokens per request.");
ABSL_FLAG(float, temperature, 0.0f, "Sampling temperature; 0 = greedy.");
ABSL_FLAG(int32_t, top_k, 0, "Top-k; 0 = off.");
ABSL_FLAG(float, top_p, 1.0f, "Top-p in (0, 1]; 1 = off.");
ABSL_FLAG(int64_t, seed, -1, "Sampling seed; -1 = server-chosen.");
ABSL_FLAG(bool, stream, false, "generate: stream the text as it is produced.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating past end-of-sequence (benchmarks).");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(120), "Per-call deadline.");
ABSL_FLAG(int32_t, streams, 4, "bench: concurrent streams.");
ABSL_FLAG(int32_t, requests, 16, "bench: total streamed requests.");
ABSL_FLAG(int32_t, latency_calls, 50, "bench: one-token Generate calls timed one by one.");
ABSL_FLAG(std::string, system, "",
          "chat: system message opening the conversation (only when the model has a chat "
          "template); empty = none.");

namespace kvserve::client {
namespace {

using common::Percentile;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "kvserve-cli: %s\n", status.ToString().c_str());
  return 1;
}

v1::GenerateRequest RequestFromFlags(const std::string& text) {
  v1::GenerateRequest request;
  request.set_text(text);
  request.set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  request.set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  v1::SamplingParams* s = request.mutable_sampling();
  s->set_temperature(absl::GetFlag(FLAGS_temperature));
  s->set_top_k(absl::GetFlag(FLAGS_top_k));
  s->set_top_p(absl::GetFlag(FLAGS_top_p));
  if (absl::GetFlag(FLAGS_seed) >= 0) s->set_seed(static_cast<uint64_t>(absl::GetFlag(FLAGS_seed)));
  return request;
}

double Seconds(const google::protobuf::Duration& d) { return d.seconds() + d.nanos() * 1e-9; }

void PrintUsage(const v1::Usage& u, v1::FinishReason reason) {
  std::fprintf(stderr,
               "[%s] prompt %d (cached local %d, remote %d, computed %d), completion %d; "
               "queue %.1f ms, ttft %.1f ms, total %.1f ms\n",
               v1::FinishReason_Name(reason).c_str(), u.prompt_tokens(), u.cached_tokens_local(),
               u.cached_tokens_remote(), u.computed_tokens(), u.completion_tokens(),
               Seconds(u.queue_time()) * 1e3, Seconds(u.time_to_first_token()) * 1e3,
               Seconds(u.total_time()) * 1e3);
}

// Streams `request`, printing each text delta as it arrives, then a newline; the last
// message (finish reason and usage) goes to `last`.
absl::Status StreamToStdout(const Client& client, const v1::GenerateRequest& request,
                            v1::GenerateStreamResponse* last) {
  absl::Status status = client.GenerateStream(request, [&](const v1::GenerateStreamResponse& m) {
    std::printf("%s", m.text().c_str());
    std::fflush(stdout);
    *last = m;
  });
  std::printf("\n");
  return status;
}

int RunGenerate(const Client& client) {
  v1::GenerateRequest request = RequestFromFlags(absl::GetFlag(FLAGS_prompt));
  if (!absl::GetFlag(FLAGS_stream)) {
    absl::StatusOr<v1::GenerateResponse> response = client.Generate(request);
    if (!response.ok()) return Fail(response.status());
    std::printf("%s%s\n", request.text().c_str(), response->text().c_str());
    PrintUsage(response->usage(), response->finish_reason());
    return 0;
  }
  std::printf("%s", request.text().c_str());
  v1::GenerateStreamResponse last;
  if (absl::Status status = StreamToStdout(client, request, &last); !status.ok()) {
    return Fail(status);
  }
  PrintUsage(last.usage(), last.finish_reason());
  return 0;
}

// A chat turn: the line as a user message when the model has a chat template (the
// server renders it; the first turn opens with --system), else the line as text.
v1::GenerateRequest ChatTurn(const std::string& line, bool use_messages, bool first_turn) {
  v1::GenerateRequest request = RequestFromFlags(line);
  if (!use_messages) return request;
  v1::Conversation* conversation = request.mutable_messages();  // clears the text
  const std::string system = absl::GetFlag(FLAGS_system);
  if (first_turn && !system.empty()) {
    v1::Message* m = conversation->add_messages();
    m->set_role("system");
    m->set_content(system);
  }
  v1::Message* m = conversation->add_messages();
  m->set_role("user");
  m->set_content(line);
  return request;
}

int RunChat(const Client& client) {
  absl::StatusOr<v1::ModelInfo> info = client.GetModelInfo();
  if (!info.ok()) return Fail(info.status());
  const bool use_messages = !info->chat_template().empty();
  absl::StatusOr<v1::Session> session = client.OpenSession();
  if (!session.ok()) return Fail(session.status());
  std::fprintf(stderr, "session %s (%s); type a turn per line, Ctrl-D to end\n",
               session->session_id().c_str(),
               use_messages ? absl::StrCat(info->chat_template(), " chat template").c_str()
                            : "no chat template: lines are sent as text");
  std::string line;
  bool first_turn = true;
  while (std::getline(std::cin, line)) {
    v1::GenerateRequest request = ChatTurn(line, use_messages, first_turn);
    request.set_session_id(session->session_id());
    v1::GenerateStreamResponse last;
    if (absl::Status status = StreamToStdout(client, request, &last); !status.ok()) {
      Fail(status);
      continue;
    }
    first_turn = false;
    PrintUsage(last.usage(), last.finish_reason());
  }
  absl::Status closed = client.CloseSession(session->session_id());
  return closed.ok() ? 0 : Fail(closed);
}

int RunBench(const Client& client) {
  const int streams = std::max(1, absl::GetFlag(FLAGS_streams));
  const int requests = std::max(1, absl::GetFlag(FLAGS_requests));
  v1::GenerateRequest request = RequestFromFlags(absl::GetFlag(FLAGS_prompt));
  // Warm-up: one request, so that lazy initialization is not measured.
  if (absl::Status s = client.GenerateStream(request, [](const auto&) {}); !s.ok()) {
    return Fail(s);
  }
  std::atomic<int> next{0};
  std::atomic<int64_t> tokens{0};
  std::atomic<int> failures{0};
  std::vector<std::vector<double>> ttft(streams);
  const absl::Time start = absl::Now();
  std::vector<std::thread> workers;
  for (int w = 0; w < streams; ++w) {
    workers.emplace_back([&, w] {
      while (next.fetch_add(1) < requests) {
        const absl::Time sent = absl::Now();
        bool first = true;
        absl::Status s = client.GenerateStream(request, [&](const v1::GenerateStreamResponse& m) {
          if (first && m.token_ids_size() > 0) {
            ttft[w].push_back(absl::ToDoubleSeconds(absl::Now() - sent));
            first = false;
          }
          tokens.fetch_add(m.token_ids_size());
        });
        if (!s.ok()) {
          failures.fetch_add(1);
          std::fprintf(stderr, "kvserve-cli: %s\n", s.ToString().c_str());
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::vector<double> all_ttft;
  for (const auto& v : ttft) all_ttft.insert(all_ttft.end(), v.begin(), v.end());

  // One-token unary latency, calls one after another.
  v1::GenerateRequest one = request;
  one.set_max_tokens(1);
  std::vector<double> latency;
  for (int i = 0; i < absl::GetFlag(FLAGS_latency_calls); ++i) {
    const absl::Time sent = absl::Now();
    absl::StatusOr<v1::GenerateResponse> r = client.Generate(one);
    if (!r.ok()) return Fail(r.status());
    latency.push_back(absl::ToDoubleSeconds(absl::Now() - sent));
  }
  std::printf(
      "{\"bench\":\"grpc_stream\",\"streams\":%d,\"requests\":%d,\"failures\":%d,"
      "\"tokens\":%lld,\"seconds\":%.4f,\"tokens_per_second\":%.1f,\"ttft_p50_ms\":%.3f,"
      "\"ttft_p95_ms\":%.3f,\"one_token_generate_p50_ms\":%.3f,"
      "\"one_token_generate_p99_ms\":%.3f}\n",
      streams, requests, failures.load(), static_cast<long long>(tokens.load()), seconds,
      tokens.load() / seconds, Percentile(all_ttft, 0.5) * 1e3, Percentile(all_ttft, 0.95) * 1e3,
      Percentile(latency, 0.5) * 1e3, Percentile(latency, 0.99) * 1e3);
  return failures.load() == 0 ? 0 : 1;
}

int RunInfo(const Client& client) {
  absl::StatusOr<v1::ModelInfo> info = client.GetModelInfo();
  if (!info.ok()) return Fail(info.status());
  std::printf("%s\n", info->DebugString().c_str());
  return 0;
}

}  // namespace
}  // namespace kvserve::client

int main(int argc, char** argv) {
  const std::vector<std::string> args = kvserve::common::ParseFlags(
      argc, argv,
      "talk to a kvserve server.\n"
      "  kvserve-cli generate --prompt TEXT [--stream] [--max_tokens N] [--temperature T]\n"
      "  kvserve-cli chat     (opens a session; each stdin line is a turn)\n"
      "  kvserve-cli bench    [--streams N] [--requests M] [--max_tokens K] [--ignore_eos]\n"
      "  kvserve-cli info\n"
      "Common: --target HOST:PORT (default 127.0.0.1:50051), --tls-ca FILE [--tls-cert FILE "
      "--tls-key FILE]. Flags accept - or _.",
      "cli_main.cc");
  if (args.size() != 2) {
    std::fprintf(stderr, "%s", absl::ProgramUsageMessage().data());
    std::fprintf(stderr, "\n");
    return 2;
  }
  const std::string command = args[1];
  kvserve::client::Client::Options options;
  options.timeout = absl::GetFlag(FLAGS_timeout);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      kvserve::service::MakeChannelCredentials({.ca_file = absl::GetFlag(FLAGS_tls_ca),
                                                .cert_file = absl::GetFlag(FLAGS_tls_cert),
                                                .key_file = absl::GetFlag(FLAGS_tls_key)});
  if (!credentials.ok()) {
    std::fprintf(stderr, "kvserve-cli: %s\n", std::string(credentials.status().message()).c_str());
    return 2;
  }
  options.credentials = *std::move(credentials);
  auto client = kvserve::client::Client::Connect(absl::GetFlag(FLAGS_target), options);
  if (!client.ok()) return kvserve::client::Fail(client.status());
  if (command == "generate") return kvserve::client::RunGenerate(**client);
  if (command == "chat") return kvserve::client::RunChat(**client);
  if (command == "bench") return kvserve::client::RunBench(**client);
  if (command == "info") return kvserve::client::RunInfo(**client);
  std::fprintf(stderr, "kvserve-cli: unknown command \"%s\" (generate, chat, bench, info)\n",
               command.c_str());
  return 2;
}
