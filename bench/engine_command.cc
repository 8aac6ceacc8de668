// kvserve-bench engine: what the engine's prefix reuse and continuous batching buy.
//
//   ttft:       time to first token of a follow-up session turn vs a cold request with
//               the same context (history + new turn), for each --history length.
//   throughput: aggregate tokens/s, p50/p99 inter-token latency and p50 TTFT with N
//               concurrent greedy streams, with and without a shared system prompt
//               (cached once before the streams start).
//
// Usage:
//   kvserve-bench engine --model FILE [--mode ttft|throughput|all] [--backend cpu_blas]
//       [--threads 2] [--history 1024,4096] [--streams 1,16,64] [--system_prompt 512]
//       [--max_tokens 32] [--kv_budget_mb 2048] [--kv_dtype f16|f32] [--reps 3]
//       [--make_ctx N]  (write the model first if FILE is missing: the s110m shape with
//                        context N, f32, via bench::WriteSyntheticModel)
// --help lists every flag with its default; names take - or _. Exit status as for every
// kvserve-bench subcommand (bench/tool_main.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "backends/cpu_blas/blas_startup.h"
#include "bench/blocking_sink.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "bench/synthetic_model.h"
#include "bench/tool_flags.h"
#include "common/stats.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/model_loading.h"
#include "model/dtype.h"
#include "model/model.h"

ABSL_FLAG(std::string, mode, "all", "ttft, throughput or all.");
ABSL_FLAG(int32_t, system_prompt, 512,
          "throughput: tokens of the shared system prompt of the second pass; 0 = one pass "
          "without.");
ABSL_FLAG(int32_t, kv_budget_mb, 2048, "KV cache memory in MiB.");
ABSL_FLAG(int32_t, reps, 3, "ttft: follow-up turns timed per history length.");
ABSL_FLAG(int32_t, make_ctx, 0,
          "Write the model first if --model is missing: the s110m shape with this context "
          "length, f32 (bench::WriteSyntheticModel); 0 = never.");

namespace kvserve::bench {
namespace {

constexpr char kUsage[] =
    "What the engine's prefix reuse and continuous batching buy: follow-up turn TTFT vs "
    "cold, and concurrent-stream throughput.\n"
    "Usage: kvserve-bench engine --model FILE [--mode ttft|throughput|all] [flags]\n"
    "Flags accept - or _ (--max-tokens or --max_tokens).";

using Clock = std::chrono::steady_clock;
using common::Percentile;

// The flags, checked.
struct Flags {
  std::string model;
  std::string mode;
  std::string backend;
  int threads = 0;
  std::vector<int> history;
  std::vector<int> streams;
  int system_prompt = 0;
  int max_tokens = 0;
  int kv_budget_mb = 0;
  model::DType kv_dtype = model::DType::kF16;
  int reps = 0;
  int make_ctx = 0;
};

absl::StatusOr<Flags> FlagsFromCommandLine() {
  Flags f;
  f.model = absl::GetFlag(FLAGS_model);
  if (f.model.empty()) return absl::InvalidArgumentError("--model is required");
  f.mode = absl::GetFlag(FLAGS_mode);
  if (f.mode != "ttft" && f.mode != "throughput" && f.mode != "all") {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode must be ttft, throughput or all, got \"", f.mode, "\""));
  }
  f.backend = absl::GetFlag(FLAGS_backend);
  absl::StatusOr<model::DType> kv_dtype =
      model::KvDTypeFromName(absl::GetFlag(FLAGS_kv_dtype), "--kv_dtype");
  if (!kv_dtype.ok()) return kv_dtype.status();
  f.kv_dtype = *kv_dtype;
  constexpr int kMax = 1 << 24;
  if (absl::Status s = ReadCounts({
          {"threads", absl::GetFlag(FLAGS_threads).value_or(2), 0, 4096, &f.threads},
          {"system_prompt", absl::GetFlag(FLAGS_system_prompt), 0, kMax, &f.system_prompt},
          {"max_tokens", absl::GetFlag(FLAGS_max_tokens).value_or(32), 2, kMax, &f.max_tokens},
          {"kv_budget_mb", absl::GetFlag(FLAGS_kv_budget_mb), 1, kMax, &f.kv_budget_mb},
          {"reps", absl::GetFlag(FLAGS_reps), 1, kMax, &f.reps},
          {"make_ctx", absl::GetFlag(FLAGS_make_ctx), 0, kMax, &f.make_ctx},
      });
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadIntList("history", absl::GetFlag(FLAGS_history), 2, kMax, &f.history);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadIntList("streams", absl::GetFlag(FLAGS_streams).value_or(IntListFlag({1, 16, 64})), 1,
                      4096, &f.streams);
      !s.ok()) {
    return s;
  }
  return f;
}

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int n, int vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = 3 + static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab - 3));
  return t;
}

engine::Request Greedy(std::vector<int32_t> prompt, int max_tokens) {
  engine::Request r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

absl::StatusOr<std::unique_ptr<engine::Engine>> NewEngine(const Flags& f, const model::Model& m) {
  engine::ModelOptions o;
  o.backend = f.backend;
  o.threads = f.threads;
  o.engine.kv_budget_bytes = static_cast<size_t>(f.kv_budget_mb) << 20;
  o.engine.kv_dtype = f.kv_dtype;
  o.engine.max_running_sequences = 64;
  o.engine.max_step_tokens = 512;
  o.engine.max_tokens_limit = 1 << 16;
  return engine::StartEngine(o, m);
}

// Submits and waits; returns the finished sink.
absl::StatusOr<std::shared_ptr<BlockingSink>> RunOne(engine::Engine& e, engine::Request r) {
  auto sink = std::make_shared<BlockingSink>();
  auto id = e.Submit(std::move(r), sink);
  if (!id.ok()) return id.status();
  if (absl::Status s = sink->Wait(); !s.ok()) return s;
  return sink;
}

absl::Status RunTtft(const Flags& f, const model::Model& m) {
  const int vocab = m.config().vocab_size;
  std::mt19937_64 rng(7);
  constexpr int kTurnTokens = 16;
  std::printf(
      "| history | cold TTFT ms | follow-up TTFT ms | speedup | cached / prompt tokens |\n");
  std::printf("|---|---|---|---|---|\n");
  for (int h : f.history) {
    if (h + (kTurnTokens + 1) * (f.reps + 1) + 2 >= m.config().context_length) {
      return absl::InvalidArgumentError(absl::StrCat("history ", h, " does not fit the context of ",
                                                     m.config().context_length,
                                                     " (see --make_ctx)"));
    }
    auto e = NewEngine(f, m);
    if (!e.ok()) return e.status();
    engine::Engine& engine = **e;
    auto session = engine.OpenSession(absl::ZeroDuration(), "");
    if (!session.ok()) return session.status();
    // Turn 1 builds a history of h tokens (h - 1 prompt tokens + 1 generated).
    engine::Request t1 = Greedy(RandomTokens(rng, h - 1, vocab), 1);
    t1.session_id = session->id;
    if (auto r = RunOne(engine, t1); !r.ok()) return r.status();
    std::vector<double> warm_ms;
    std::vector<double> cold_ms;
    int32_t cached = 0;
    int32_t prompt = 0;
    for (int rep = 0; rep < f.reps; ++rep) {
      const std::vector<int32_t> turn = RandomTokens(rng, kTurnTokens, vocab);
      engine::Request t = Greedy(turn, 1);
      t.session_id = session->id;
      auto r = RunOne(engine, t);
      if (!r.ok()) return r.status();
      warm_ms.push_back(absl::ToDoubleMilliseconds((*r)->usage().time_to_first_token));
      cached = (*r)->usage().cached_tokens;
      prompt = (*r)->usage().prompt_tokens;
    }
    // Cold: the same context (the session's history before the last turn + that turn),
    // under a salt nobody else uses, so nothing is reused.
    auto info = engine.GetSession(session->id, "");
    if (!info.ok()) return info.status();
    const int cold_reps = std::max(1, std::min(f.reps, 2));
    for (int rep = 0; rep < cold_reps; ++rep) {
      engine::Request cold = Greedy(RandomTokens(rng, prompt, vocab), 1);
      cold.cache_salt = absl::StrCat("cold-", h, "-", rep);
      auto r = RunOne(engine, cold);
      if (!r.ok()) return r.status();
      if ((*r)->usage().cached_tokens != 0)
        return absl::InternalError("cold request hit the cache");
      cold_ms.push_back(absl::ToDoubleMilliseconds((*r)->usage().time_to_first_token));
    }
    const double warm = Percentile(warm_ms, 0.5);
    const double cold = Percentile(cold_ms, 0.5);
    std::printf("| %d | %.1f | %.1f | %.1fx | %d / %d |\n", h, cold, warm, cold / warm, cached,
                prompt);
    std::fflush(stdout);
    engine.Shutdown(absl::InfiniteFuture());
  }
  return absl::OkStatus();
}

absl::Status RunThroughput(const Flags& f, const model::Model& m) {
  const int vocab = m.config().vocab_size;
  std::printf(
      "| system prompt | streams | tokens/s | p50 ITL ms | p99 ITL ms | p50 TTFT ms | "
      "cached/prompt (mean) |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int sys : {0, f.system_prompt}) {
    for (int n : f.streams) {
      auto e = NewEngine(f, m);
      if (!e.ok()) return e.status();
      engine::Engine& engine = **e;
      std::mt19937_64 rng(11);
      const std::vector<int32_t> system = RandomTokens(rng, sys, vocab);
      if (sys > 0) {
        // Cache the system prompt once, as a deployment would after its first request.
        if (auto r = RunOne(engine, Greedy(system, 1)); !r.ok()) return r.status();
      }
      std::vector<std::shared_ptr<BlockingSink>> sinks;
      const auto start = Clock::now();
      for (int i = 0; i < n; ++i) {
        std::vector<int32_t> prompt = system;
        const std::vector<int32_t> own = RandomTokens(rng, 16, vocab);
        prompt.insert(prompt.end(), own.begin(), own.end());
        auto sink = std::make_shared<BlockingSink>();
        auto id = engine.Submit(Greedy(std::move(prompt), f.max_tokens), sink);
        if (!id.ok()) return id.status();
        sinks.push_back(std::move(sink));
      }
      std::vector<double> itl_ms;
      std::vector<double> ttft_ms;
      int64_t tokens = 0;
      double cached_frac = 0.0;
      Clock::time_point end = start;
      for (auto& s : sinks) {
        if (absl::Status status = s->Wait(); !status.ok()) return status;
        const auto& t = s->token_times();
        tokens += static_cast<int64_t>(t.size());
        for (size_t k = 1; k < t.size(); ++k) {
          itl_ms.push_back(std::chrono::duration<double, std::milli>(t[k] - t[k - 1]).count());
        }
        ttft_ms.push_back(absl::ToDoubleMilliseconds(s->usage().time_to_first_token));
        cached_frac += static_cast<double>(s->usage().cached_tokens) /
                       static_cast<double>(std::max(1, s->usage().prompt_tokens));
        if (!t.empty()) end = std::max(end, t.back());
      }
      const double seconds = std::chrono::duration<double>(end - start).count();
      std::printf("| %d | %d | %.1f | %.2f | %.2f | %.1f | %.2f |\n", sys, n,
                  static_cast<double>(tokens) / seconds, Percentile(itl_ms, 0.5),
                  Percentile(itl_ms, 0.99), Percentile(ttft_ms, 0.5), cached_frac / n);
      std::fflush(stdout);
      engine.Shutdown(absl::InfiniteFuture());
    }
    if (f.system_prompt == 0) break;
  }
  return absl::OkStatus();
}

absl::Status Main() {
  absl::StatusOr<Flags> flags = FlagsFromCommandLine();
  if (!flags.ok()) return flags.status();
  const Flags& f = *flags;
  if (!std::filesystem::exists(f.model) && f.make_ctx > 0) {
    absl::StatusOr<model::ModelConfig> config = PresetConfig("s110m");
    if (!config.ok()) return config.status();
    SyntheticModelOptions o;
    o.config = *config;
    o.config.context_length = f.make_ctx;
    o.name = absl::StrCat("kvserve-synthetic-s110m-ctx", f.make_ctx);
    std::fprintf(stderr, "writing %s (s110m shape, context %d, f32)\n", f.model.c_str(),
                 f.make_ctx);
    if (absl::Status s = WriteSyntheticModel(o, f.model); !s.ok()) return s;
  }
  auto m = model::Model::Load(f.model);
  if (!m.ok()) return m.status();
  const model::ModelConfig& c = (*m)->config();
  std::printf("model %s: dim %d, layers %d, vocab %d, context %d; backend %s, %d threads, kv %s\n",
              f.model.c_str(), c.dim, c.n_layers, c.vocab_size, c.context_length, f.backend.c_str(),
              f.threads, std::string(model::DTypeName(f.kv_dtype)).c_str());
  if (f.mode == "ttft" || f.mode == "all") {
    if (absl::Status s = RunTtft(f, **m); !s.ok()) return s;
  }
  if (f.mode == "throughput" || f.mode == "all") {
    if (absl::Status s = RunThroughput(f, **m); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

Subcommand EngineCommand() {
  return {
      .name = "engine",
      .summary = "follow-up turn TTFT vs cold, and concurrent-stream throughput of the engine",
      .usage = kUsage,
      .file = __FILE__,
      .shared_flags = {{"model", "GGUF model file. Required."},
                       {"backend"},
                       {"threads", "Backend threads; 0 = all cores.", "2"},
                       {"history", "ttft: session history lengths in tokens, comma-separated."},
                       {"streams", "throughput: concurrent stream counts, comma-separated.",
                        "1,16,64"},
                       {"max_tokens", "throughput: tokens per stream (>= 2).", "32"},
                       {"kv_dtype"},
                       {"blas_reexec"}},
      .run =
          [](char** argv) {
            backends::cpu_blas::EnsureBestBlasCore("kvserve-bench engine",
                                                   absl::GetFlag(FLAGS_blas_reexec), argv);
            return Main();
          },
  };
}

}  // namespace kvserve::bench
