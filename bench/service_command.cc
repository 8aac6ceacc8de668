// kvserve-bench service: what the gRPC layer costs. Runs the same workload (concurrent
// greedy streams of a fixed length) twice over one model: straight into an in-process
// engine, then through a kvserve Server on a loopback port, streamed by the service's load
// generator (client/load_generator.h, the one kvserve-cli bench runs; retries off). Also
// times one-token requests one after another (unary Generate vs an engine Submit). Prints
// one JSON line.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "backends/cpu_blas/blas_startup.h"
#include "bench/blocking_sink.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "client/client.h"
#include "client/load_generator.h"
#include "common/stats.h"
#include "engine/model_loading.h"
#include "grpcpp/grpcpp.h"
#include "kvserve/v1/inference.grpc.pb.h"
#include "model/tokenizer.h"
#include "service/server.h"

ABSL_FLAG(int32_t, requests, 16, "Requests per run.");
ABSL_FLAG(int32_t, latency_calls, 50, "One-token requests timed one after another.");
ABSL_FLAG(absl::Duration, stream_flush_interval, absl::Milliseconds(1),
          "The server's --stream-flush-interval (its default: 1ms); 0 = a message per token.");
ABSL_FLAG(int32_t, rounds, 9,
          "Alternating engine/gRPC rounds; medians are reported (and the ratio's range).");

namespace kvserve::bench {
namespace {

using common::Percentile;
using engine::LoadedModel;
using engine::ModelOptions;

constexpr char kDefaultModel[] = "models/stories260K.gguf";
constexpr int kDefaultStreams = 4;
constexpr int kDefaultMaxTokens = 256;
constexpr char kDefaultPrompt[] = "Once upon a time";

struct RunResult {
  int64_t tokens = 0;
  double seconds = 0.0;
  double cpu_seconds = 0.0;  // of the whole process (engine, gRPC server and client)
  int failures = 0;
};

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Runs `requests` calls of `one_request` (returns tokens, or -1 on failure) on `streams`
// threads.
RunResult RunConcurrent(int streams, int requests, const std::function<int64_t()>& one_request) {
  std::atomic<int> next{0};
  std::atomic<int64_t> tokens{0};
  std::atomic<int> failures{0};
  const absl::Time start = absl::Now();
  const double cpu_start = ProcessCpuSeconds();
  std::vector<std::thread> workers;
  for (int w = 0; w < streams; ++w) {
    workers.emplace_back([&] {
      while (next.fetch_add(1) < requests) {
        const int64_t n = one_request();
        if (n < 0) {
          failures.fetch_add(1);
        } else {
          tokens.fetch_add(n);
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  return {tokens.load(), absl::ToDoubleSeconds(absl::Now() - start),
          ProcessCpuSeconds() - cpu_start, failures.load()};
}

int64_t EngineRequest(engine::Engine& engine, const std::vector<int32_t>& prompt, int max_tokens) {
  engine::Request request;
  request.prompt_tokens = prompt;
  request.sampling.temperature = 0.0f;
  request.sampling.max_tokens = max_tokens;
  request.sampling.ignore_eos = true;
  auto sink = std::make_shared<BlockingSink>();
  if (!engine.Submit(std::move(request), sink).ok() || !sink->Wait().ok()) return -1;
  return static_cast<int64_t>(sink->token_times().size());
}

// The same streams over gRPC: the load generator with `streams` workers sends `requests`
// copies of `request`; adds the stream messages received to `messages`.
RunResult RunOverGrpc(const client::Client& client, const v1::GenerateRequest& request, int streams,
                      int requests, int64_t* messages) {
  client::bench::LoadOptions load;
  load.request = request;
  load.workload.requests = requests;
  load.concurrency = streams;
  load.warmup = 0;
  const double cpu_start = ProcessCpuSeconds();
  absl::StatusOr<client::bench::Report> report = client::bench::RunLoad(client, std::move(load));
  const double cpu_seconds = ProcessCpuSeconds() - cpu_start;
  if (!report.ok()) {
    std::fprintf(stderr, "kvserve-bench service: %s\n", report.status().ToString().c_str());
    return {0, 0.0, cpu_seconds, requests};
  }
  *messages += report->stream_messages;
  return {report->output_tokens, report->duration_s, cpu_seconds, static_cast<int>(report->failed)};
}

absl::Status Run() {
  ModelOptions options;
  options.model_path = absl::GetFlag(FLAGS_model);
  if (options.model_path.empty()) options.model_path = kDefaultModel;
  options.backend = absl::GetFlag(FLAGS_backend);
  options.threads = absl::GetFlag(FLAGS_threads).value_or(0);
  const std::vector<int> stream_list =
      absl::GetFlag(FLAGS_streams).value_or(IntListFlag({kDefaultStreams})).values;
  if (stream_list.size() != 1) {
    return absl::InvalidArgumentError(
        "--streams: one count here (the engine subcommand takes a list)");
  }
  const int streams = stream_list[0];
  const int requests = absl::GetFlag(FLAGS_requests);
  const int max_tokens = absl::GetFlag(FLAGS_max_tokens).value_or(kDefaultMaxTokens);
  const int latency_calls = absl::GetFlag(FLAGS_latency_calls);
  const std::string prompt_text = absl::GetFlag(FLAGS_prompt).text.value_or(kDefaultPrompt);

  // Two engines over the same file: one called directly, one behind a gRPC server. The
  // runs alternate (medians of --rounds each) so that machine noise hits both alike.
  absl::StatusOr<LoadedModel> direct = engine::LoadModel(options);
  if (!direct.ok()) return direct.status();
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer =
      model::Tokenizer::Create(direct->model->vocab());
  if (!tokenizer.ok()) return tokenizer.status();
  const std::vector<int32_t> prompt = (*tokenizer)->Encode(prompt_text, /*add_bos=*/true);
  engine::Engine& engine = *direct->engine;

  service::ServerOptions server_options;
  server_options.listen_address = "127.0.0.1:0";
  server_options.metrics.address = "";
  server_options.service.stream_flush_interval = absl::GetFlag(FLAGS_stream_flush_interval);
  options.engine.max_tokens_limit = std::max(4096, max_tokens);
  absl::StatusOr<std::unique_ptr<service::Server>> server = service::Server::Start(server_options);
  absl::StatusOr<LoadedModel> served = engine::LoadModel(options);
  if (!server.ok()) return server.status();
  if (!served.ok()) return served.status();
  if (absl::Status s =
          (*server)->Attach(std::move(served->model), std::move(served->engine), served->backend);
      !s.ok()) {
    return s;
  }
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Inference::NewStub(channel);
  v1::GenerateRequest request;
  request.mutable_tokens()->mutable_ids()->Add(prompt.begin(), prompt.end());
  request.mutable_sampling()->set_temperature(0.0f);
  request.set_max_tokens(max_tokens);
  request.set_ignore_eos(true);
  client::Client::Options client_options;
  client_options.retry.max_attempts = 1;  // measure the server, not the client's retries
  client_options.timeout = absl::Minutes(10);
  absl::StatusOr<std::unique_ptr<client::Client>> client =
      client::Client::Connect(absl::StrCat("127.0.0.1:", (*server)->port()), client_options);
  if (!client.ok()) return client.status();
  // Stream messages received over all timed gRPC runs.
  int64_t messages = 0;
  auto grpc_run = [&] { return RunOverGrpc(**client, request, streams, requests, &messages); };
  auto engine_request = [&] { return EngineRequest(engine, prompt, max_tokens); };
  engine_request();                                                    // warm-up
  if (RunOverGrpc(**client, request, 1, 1, &messages).failures > 0) {  // warm-up
    return absl::InternalError("the warm-up request over gRPC failed");
  }
  messages = 0;
  int64_t streamed_tokens = 0;

  RunResult in_process, over_grpc;
  std::vector<double> engine_runs, grpc_runs, ratios, engine_cpu, grpc_cpu;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    // Alternate which goes first, too.
    RunResult e, g;
    if (round % 2 == 0) {
      e = RunConcurrent(streams, requests, engine_request);
      g = grpc_run();
    } else {
      g = grpc_run();
      e = RunConcurrent(streams, requests, engine_request);
    }
    streamed_tokens += g.tokens;
    in_process.failures += e.failures;
    over_grpc.failures += g.failures;
    engine_runs.push_back(e.tokens / e.seconds);
    grpc_runs.push_back(g.tokens / g.seconds);
    ratios.push_back(grpc_runs.back() / engine_runs.back());
    engine_cpu.push_back(e.cpu_seconds / e.tokens * 1e6);
    grpc_cpu.push_back(g.cpu_seconds / g.tokens * 1e6);
  }
  const double engine_tps = Percentile(engine_runs, 0.5);
  const double grpc_tps = Percentile(grpc_runs, 0.5);

  std::vector<double> engine_latency;
  std::vector<double> grpc_latency;
  v1::GenerateRequest one = request;
  one.set_max_tokens(1);
  for (int i = 0; i < latency_calls; ++i) {
    absl::Time t = absl::Now();
    EngineRequest(engine, prompt, 1);
    engine_latency.push_back(absl::ToDoubleSeconds(absl::Now() - t));
    grpc::ClientContext ctx;
    v1::GenerateResponse resp;
    t = absl::Now();
    if (grpc::Status s = stub->Generate(&ctx, one, &resp); !s.ok()) {
      return absl::InternalError(absl::StrCat("Generate: ", s.error_message()));
    }
    grpc_latency.push_back(absl::ToDoubleSeconds(absl::Now() - t));
  }
  (*server)->Drain(absl::ZeroDuration());

  std::printf(
      "{\"bench\":\"service\",\"model\":\"%s\",\"backend\":\"%s\",\"streams\":%d,"
      "\"requests\":%d,\"rounds\":%d,\"max_tokens\":%d,\"engine_tokens_per_second\":%.1f,"
      "\"grpc_tokens_per_second\":%.1f,\"grpc_over_engine_median\":%.3f,"
      "\"grpc_over_engine_min\":%.3f,\"grpc_over_engine_max\":%.3f,"
      "\"engine_cpu_us_per_token\":%.1f,\"grpc_cpu_us_per_token\":%.1f,\"failures\":%d,"
      "\"engine_one_token_p50_ms\":%.3f,\"grpc_one_token_generate_p50_ms\":%.3f,"
      "\"grpc_one_token_generate_p99_ms\":%.3f,\"stream_flush_interval_us\":%lld,"
      "\"tokens_per_stream_message\":%.2f}\n",
      options.model_path.c_str(), options.backend.c_str(), streams, requests,
      absl::GetFlag(FLAGS_rounds), max_tokens, engine_tps, grpc_tps, Percentile(ratios, 0.5),
      Percentile(ratios, 0.0), Percentile(ratios, 1.0), Percentile(engine_cpu, 0.5),
      Percentile(grpc_cpu, 0.5), in_process.failures + over_grpc.failures,
      Percentile(engine_latency, 0.5) * 1e3, Percentile(grpc_latency, 0.5) * 1e3,
      Percentile(grpc_latency, 0.99) * 1e3,
      static_cast<long long>(absl::ToInt64Microseconds(absl::GetFlag(FLAGS_stream_flush_interval))),
      messages > 0 ? static_cast<double>(streamed_tokens) / static_cast<double>(messages) : 0.0);
  const int failures = in_process.failures + over_grpc.failures;
  if (failures > 0) return absl::InternalError(absl::StrCat(failures, " requests failed"));
  return absl::OkStatus();
}

}  // namespace

Subcommand ServiceCommand() {
  return {
      .name = "service",
      .summary = "what the gRPC layer costs: streams into the engine vs through kvserve",
      .usage =
          "What the gRPC layer costs: the same greedy streams into an in-process engine and "
          "through a kvserve server on loopback; prints one JSON line.\n"
          "Usage: kvserve-bench service [--model models/stories260K.gguf] [flags]\n"
          "Flags accept - or _ (--max-tokens or --max_tokens).",
      .file = __FILE__,
      .shared_flags = {{"model", "Model file (GGUF).", kDefaultModel},
                       {"backend"},
                       {"threads", "Backend threads; 0 = all cores.", "0"},
                       {"streams", "Concurrent streams (one count).", "4"},
                       {"max_tokens", "Tokens generated per request (ignore_eos).", "256"},
                       {"prompt", "Prompt text.", kDefaultPrompt},
                       {"blas_reexec"}},
      .run =
          [](char** argv) {
            backends::cpu_blas::EnsureBestBlasCore("kvserve-bench service",
                                                   absl::GetFlag(FLAGS_blas_reexec), argv);
            return Run();
          },
  };
}

}  // namespace kvserve::bench
