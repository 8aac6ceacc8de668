// kvserve-engine-bench: what the engine's prefix reuse and continuous batching buy.
//
//   ttft:       time to first token of a follow-up session turn vs a cold request with
//               the same context (history + new turn), for each --history length.
//   throughput: aggregate tokens/s, p50/p99 inter-token latency and p50 TTFT with N
//               concurrent greedy streams, with and without a shared system prompt
//               (cached once before the streams start).
//
// Usage:
//   kvserve-engine-bench --model FILE [--mode ttft|throughput|all] [--backend cpu_blas]
//       [--threads 2] [--history 1024,4096] [--streams 1,16,64] [--system_prompt 512]
//       [--max_tokens 32] [--kv_budget_mb 2048] [--kv_dtype f32|f16] [--reps 3]
//       [--make_ctx N]  (write the model first if FILE is missing: the s110m shape with
//                        context N, f32, via bench::WriteSyntheticModel)
#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/synthetic_model.h"
#include "common/stats.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/model_loading.h"
#include "model/model.h"

namespace kvserve::bench {
namespace {

using Clock = std::chrono::steady_clock;
using common::Percentile;

struct Flags {
  std::string model;
  std::string mode = "all";
  std::string backend = "cpu_blas";
  int threads = 2;
  std::vector<int> history = {1024, 4096};
  std::vector<int> streams = {1, 16, 64};
  int system_prompt = 512;
  int max_tokens = 32;
  int kv_budget_mb = 2048;
  std::string kv_dtype = "f32";
  int reps = 3;
  int make_ctx = 0;
};

bool ParseInt(std::string_view s, int& out) {
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && ptr == end && out >= 0;
}

absl::Status ParseInts(std::string_view value, std::vector<int>& out) {
  out.clear();
  while (true) {
    const size_t comma = value.find(',');
    int v = 0;
    if (!ParseInt(value.substr(0, comma), v)) {
      return absl::InvalidArgumentError(absl::StrCat("bad number list: ", std::string(value)));
    }
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return absl::OkStatus();
}

absl::Status ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (i + 1 >= argc)
      return absl::InvalidArgumentError(absl::StrCat("missing value for ", std::string(arg)));
    std::string_view value = argv[++i];
    int v = 0;
    auto as_int = [&](int& dst) -> absl::Status {
      if (!ParseInt(value, v)) {
        return absl::InvalidArgumentError(absl::StrCat(std::string(arg), ": bad number"));
      }
      dst = v;
      return absl::OkStatus();
    };
    absl::Status s;
    if (arg == "--model") {
      f.model = std::string(value);
    } else if (arg == "--mode") {
      f.mode = std::string(value);
    } else if (arg == "--backend") {
      f.backend = std::string(value);
    } else if (arg == "--kv_dtype") {
      f.kv_dtype = std::string(value);
    } else if (arg == "--threads") {
      s = as_int(f.threads);
    } else if (arg == "--history") {
      s = ParseInts(value, f.history);
    } else if (arg == "--streams") {
      s = ParseInts(value, f.streams);
    } else if (arg == "--system_prompt") {
      s = as_int(f.system_prompt);
    } else if (arg == "--max_tokens") {
      s = as_int(f.max_tokens);
    } else if (arg == "--kv_budget_mb") {
      s = as_int(f.kv_budget_mb);
    } else if (arg == "--reps") {
      s = as_int(f.reps);
    } else if (arg == "--make_ctx") {
      s = as_int(f.make_ctx);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", std::string(arg)));
    }
    if (!s.ok()) return s;
  }
  if (f.model.empty()) return absl::InvalidArgumentError("--model is required");
  if (f.max_tokens < 2) return absl::InvalidArgumentError("--max_tokens must be >= 2");
  return absl::OkStatus();
}

// Records the arrival time of every token of one stream.
class TimingSink : public engine::RequestSink {
 public:
  void OnToken(const engine::TokenEvent& event) override {
    if (event.token == engine::kTextOnlyToken) return;
    std::lock_guard<std::mutex> lock(mu_);
    times_.push_back(Clock::now());
  }
  void OnFinish(const absl::Status& status, engine::FinishReason,
                const engine::Usage& usage) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    usage_ = usage;
    done_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
  }
  // Call after Wait().
  const std::vector<Clock::time_point>& times() const { return times_; }
  const absl::Status& status() const { return status_; }
  const engine::Usage& usage() const { return usage_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Clock::time_point> times_;
  absl::Status status_;
  engine::Usage usage_;
  bool done_ = false;
};

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
  o.engine.kv_dtype = f.kv_dtype == "f16" ? model::DType::kF16 : model::DType::kF32;
  o.engine.max_running_sequences = 64;
  o.engine.max_step_tokens = 512;
  o.engine.max_tokens_limit = 1 << 16;
  return engine::StartEngine(o, m);
}

// Submits and waits; returns the finished sink.
absl::StatusOr<std::shared_ptr<TimingSink>> RunOne(engine::Engine& e, engine::Request r) {
  auto sink = std::make_shared<TimingSink>();
  auto id = e.Submit(std::move(r), sink);
  if (!id.ok()) return id.status();
  sink->Wait();
  if (!sink->status().ok()) return sink->status();
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
    auto session = engine.OpenSession(absl::ZeroDuration());
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
    auto info = engine.GetSession(session->id);
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
      std::vector<std::shared_ptr<TimingSink>> sinks;
      const auto start = Clock::now();
      for (int i = 0; i < n; ++i) {
        std::vector<int32_t> prompt = system;
        const std::vector<int32_t> own = RandomTokens(rng, 16, vocab);
        prompt.insert(prompt.end(), own.begin(), own.end());
        auto sink = std::make_shared<TimingSink>();
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
        s->Wait();
        if (!s->status().ok()) return s->status();
        const auto& t = s->times();
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

absl::Status Main(const Flags& f) {
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
              f.threads, f.kv_dtype.c_str());
  if (f.mode == "ttft" || f.mode == "all") {
    if (absl::Status s = RunTtft(f, **m); !s.ok()) return s;
  }
  if (f.mode == "throughput" || f.mode == "all") {
    if (absl::Status s = RunThroughput(f, **m); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvserve::bench

int main(int argc, char** argv) {
  kvserve::bench::Flags flags;
  if (absl::Status s = kvserve::bench::ParseFlags(argc, argv, flags); !s.ok()) {
    std::fprintf(stderr, "kvserve-engine-bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s = kvserve::bench::Main(flags); !s.ok()) {
    std::fprintf(stderr, "kvserve-engine-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
