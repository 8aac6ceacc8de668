// kvserve-bench speculative: what speculative decoding buys, side by side.
//
// For each workload, stream count and draft length: the same greedy requests run on an
// engine without drafts and on one with them, alternated for --repeats rounds; reports
// the median aggregate tokens/s of each, their ratio, the acceptance rate (accepted /
// verified draft tokens) and the mean tokens accepted per verification; checks the
// outputs are equal (they must be: greedy verification is exact).
//   repeat: a random 48-token segment said three times, then its start: text to copy.
//   plain:  192 random tokens: nothing to copy (the n-gram source then proposes little;
//           the row shows what speculation costs when it cannot help).
//   story:  "Once upon a time" (models with a tokenizer): the model's own text, whose
//           repetitions the n-gram source catches.
//
// Usage:
// With --source draft_model, the drafts come from --draft_model FILE (a smaller or
// quantized model with the same vocabulary; its time is in "tokens/s on").
// Usage:
//   kvserve-bench speculative --model FILE [--source ngram|draft_model]
//       [--draft_model FILE] [--draft_lengths 2,4,8]
//       [--workloads repeat,plain,story] [--streams 1,16] [--max_tokens 128]
//       [--repeats 3] [--backend cpu_blas] [--threads 2] [--kv_dtype f32] [--adaptive]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "backends/cpu_blas/blas_startup.h"
#include "bench/blocking_sink.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "bench/tool_flags.h"
#include "common/stats.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/model_loading.h"
#include "model/dtype.h"
#include "model/model.h"
#include "model/tokenizer.h"

ABSL_FLAG(std::string, source, "ngram", "Draft source: ngram or draft_model.");
ABSL_FLAG(std::string, draft_model, "",
          "With --source draft_model: the draft model file (the target's vocabulary).");
ABSL_FLAG(int32_t, draft_threads, 0, "Threads of the draft model; 0 = as --threads.");
ABSL_FLAG(double, draft_min_acceptance, 0.0,
          "Draft model: no further drafts that step after a token whose lead's learnt "
          "acceptance is below this (kvserve's --draft_min_acceptance); 0 = off.");
ABSL_FLAG(double, draft_min_margin, 0.0,
          "Draft model: no further drafts that step after a token whose logit leads the "
          "runner-up's by less than this (kvserve's --draft_min_margin); 0 = off.");
ABSL_FLAG(kvserve::bench::IntListFlag, draft_lengths, kvserve::bench::IntListFlag({2, 4, 8}),
          "Largest drafts (--draft_max of kvserve) to measure, comma-separated.");
ABSL_FLAG(bool, adaptive, true,
          "Keep drafts only where measured faster (kvserve's default); false: always draft, "
          "to measure what drafts cost and give at each acceptance.");
ABSL_FLAG(std::string, workloads, "repeat,plain,story",
          "Prompt kinds, comma-separated: repeat, plain, story.");

namespace kvserve::bench {
namespace {

constexpr char kUsage[] =
    "What speculative decoding buys: tokens/s with and without drafts, alternated rounds, "
    "with the acceptance.\n"
    "Usage: kvserve-bench speculative --model FILE [flags]\n"
    "Flags accept - or _ (--max-tokens or --max_tokens).";

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string model;
  std::string backend;
  std::string source;
  std::string draft_model;
  int threads = 0;
  int max_tokens = 0;
  int repeats = 0;
  std::vector<int> streams;
  std::vector<int> draft_lengths;
  std::vector<std::string> workloads;
  bool adaptive = true;
  model::DType kv_dtype = model::DType::kF32;
};

absl::StatusOr<Flags> FlagsFromCommandLine() {
  Flags f;
  f.model = absl::GetFlag(FLAGS_model);
  if (f.model.empty()) return absl::InvalidArgumentError("--model is required");
  f.backend = absl::GetFlag(FLAGS_backend);
  f.source = absl::GetFlag(FLAGS_source);
  f.adaptive = absl::GetFlag(FLAGS_adaptive);
  f.draft_model = absl::GetFlag(FLAGS_draft_model);
  if (f.source != "ngram" && f.source != "draft_model") {
    return absl::InvalidArgumentError(
        absl::StrCat("--source must be ngram or draft_model, got \"", f.source, "\""));
  }
  if ((f.source == "draft_model") != !f.draft_model.empty()) {
    return absl::InvalidArgumentError("--draft_model is required with --source draft_model only");
  }
  absl::StatusOr<model::DType> kv_dtype =
      model::KvDTypeFromName(absl::GetFlag(FLAGS_kv_dtype), "--kv_dtype");
  if (!kv_dtype.ok()) return kv_dtype.status();
  f.kv_dtype = *kv_dtype;
  if (absl::Status s = ReadCounts({
          {"threads", absl::GetFlag(FLAGS_threads).value_or(2), 0, 4096, &f.threads},
          {"max_tokens", absl::GetFlag(FLAGS_max_tokens).value_or(128), 2, 1 << 20, &f.max_tokens},
          {"repeats", absl::GetFlag(FLAGS_repeats), 1, 1000, &f.repeats},
      });
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadIntList("streams", absl::GetFlag(FLAGS_streams).value_or(IntListFlag({1, 16})), 1,
                      4096, &f.streams);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadIntList("draft_lengths", absl::GetFlag(FLAGS_draft_lengths), 1,
                                   engine::kMaxDraftTokens, &f.draft_lengths);
      !s.ok()) {
    return s;
  }
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_workloads), ',')) {
    if (w != "repeat" && w != "plain" && w != "story") {
      return absl::InvalidArgumentError(
          absl::StrCat("--workloads: unknown workload \"", w, "\" (repeat, plain, story)"));
    }
    f.workloads.emplace_back(w);
  }
  return f;
}

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int n, int vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = 3 + static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab - 3));
  return t;
}

// The prompt of stream `i` of `workload`; empty when the workload needs a tokenizer the
// model lacks.
std::vector<int32_t> WorkloadPrompt(const std::string& workload, int i, const model::Model& m,
                                    const model::Tokenizer* tokenizer) {
  const int vocab = m.config().vocab_size;
  std::mt19937_64 rng(1000 + static_cast<uint64_t>(i));
  if (workload == "plain") return RandomTokens(rng, 192, vocab);
  if (workload == "repeat") {
    const std::vector<int32_t> segment = RandomTokens(rng, 48, vocab);
    std::vector<int32_t> p;
    for (int r = 0; r < 3; ++r) p.insert(p.end(), segment.begin(), segment.end());
    p.insert(p.end(), segment.begin(), segment.begin() + 8);
    return p;
  }
  if (tokenizer == nullptr) return {};
  // Different openings per stream so that streams do not share a prefix.
  static constexpr const char* kOpenings[] = {"Once upon a time", "One day", "Lily and Tom",
                                              "The little dog"};
  return tokenizer->Encode(kOpenings[i % 4], /*add_bos=*/true);
}

struct Round {
  double tokens_per_second = 0.0;
  std::vector<std::vector<int32_t>> outputs;
  int64_t drafts = 0;
  int64_t accepted = 0;
  int64_t verifications = 0;
};

absl::StatusOr<Round> RunRound(engine::Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                               int max_tokens) {
  const engine::SpeculativeStats before = e.Stats().speculative;
  std::vector<std::shared_ptr<BlockingSink>> sinks;
  const auto start = Clock::now();
  for (const std::vector<int32_t>& p : prompts) {
    engine::Request r;
    r.prompt_tokens = p;
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    r.cache_salt = absl::StrCat(start.time_since_epoch().count());  // every round cold
    auto sink = std::make_shared<BlockingSink>();
    if (auto id = e.Submit(std::move(r), sink); !id.ok()) return id.status();
    sinks.push_back(std::move(sink));
  }
  Round round;
  int64_t tokens = 0;
  Clock::time_point end = start;
  for (auto& s : sinks) {
    if (absl::Status status = s->Wait(); !status.ok()) return status;
    tokens += static_cast<int64_t>(s->token_times().size());
    if (!s->token_times().empty()) end = std::max(end, s->token_times().back());
    round.outputs.push_back(s->tokens());
  }
  round.tokens_per_second =
      static_cast<double>(tokens) / std::chrono::duration<double>(end - start).count();
  const engine::SpeculativeStats after = e.Stats().speculative;
  round.drafts = after.draft_tokens_total - before.draft_tokens_total;
  round.accepted = after.accepted_tokens_total - before.accepted_tokens_total;
  round.verifications = after.verifications_total - before.verifications_total;
  return round;
}

absl::Status Main() {
  absl::StatusOr<Flags> flags = FlagsFromCommandLine();
  if (!flags.ok()) return flags.status();
  const Flags& f = *flags;
  auto m = model::Model::Load(f.model);
  if (!m.ok()) return m.status();
  const model::Model& model = **m;
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer =
      model::Tokenizer::Create(model.vocab());
  const model::Tokenizer* tok = tokenizer.ok() ? tokenizer->get() : nullptr;
  // An engine with drafts of at most draft_max tokens (0: none).
  auto start_engine = [&](int draft_max) -> absl::StatusOr<std::unique_ptr<engine::Engine>> {
    engine::ModelOptions o;
    o.backend = f.backend;
    o.threads = f.threads;
    o.engine.kv_dtype = f.kv_dtype;
    o.engine.kv_budget_bytes = size_t{1} << 30;
    o.engine.max_tokens_limit = 1 << 20;
    if (draft_max > 0) {
      o.engine.speculative.source = f.source;
      o.engine.speculative.draft_max = draft_max;
      o.engine.speculative.max_batch = 4;
      o.engine.speculative.adaptive = f.adaptive;
      if (!f.draft_model.empty()) {
        o.draft_model_path = f.draft_model;
        o.draft_threads = absl::GetFlag(FLAGS_draft_threads);
        o.draft.min_margin = absl::GetFlag(FLAGS_draft_min_margin);
        o.draft.min_acceptance = absl::GetFlag(FLAGS_draft_min_acceptance);
        absl::StatusOr<std::unique_ptr<engine::DraftSource>> draft =
            engine::LoadDraftModel(o, model);
        if (!draft.ok()) return draft.status();
        return engine::StartEngine(o, model, *std::move(draft));
      }
    }
    return engine::StartEngine(o, model);
  };
  std::printf(
      "model %s, backend %s, %d threads, kv %s, source %s, %d tokens per stream, "
      "medians of %d alternated rounds\n",
      f.model.c_str(), f.backend.c_str(), f.threads,
      std::string(model::DTypeName(f.kv_dtype)).c_str(),
      (f.draft_model.empty() ? f.source : absl::StrCat(f.source, " ", f.draft_model)).c_str(),
      f.max_tokens, f.repeats);
  std::printf(
      "| workload | streams | draft max | tokens/s off | tokens/s on | speedup | acceptance | "
      "accepted per verification | same output |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& w : f.workloads) {
    for (int n : f.streams) {
      std::vector<std::vector<int32_t>> prompts;
      for (int i = 0; i < n; ++i) prompts.push_back(WorkloadPrompt(w, i, model, tok));
      if (prompts.front().empty()) {
        std::printf("| %s | %d | - | (the model has no tokenizer) |\n", w.c_str(), n);
        continue;
      }
      for (int k : f.draft_lengths) {
        auto off = start_engine(0);
        if (!off.ok()) return off.status();
        auto on = start_engine(k);
        if (!on.ok()) return on.status();
        std::vector<double> off_tps, on_tps, speedups;
        int64_t drafts = 0, accepted = 0, verifications = 0;
        bool same = true;
        for (int r = 0; r < f.repeats; ++r) {
          auto a = RunRound(**off, prompts, f.max_tokens);
          if (!a.ok()) return a.status();
          auto b = RunRound(**on, prompts, f.max_tokens);
          if (!b.ok()) return b.status();
          off_tps.push_back(a->tokens_per_second);
          on_tps.push_back(b->tokens_per_second);
          speedups.push_back(b->tokens_per_second / a->tokens_per_second);
          drafts += b->drafts;
          accepted += b->accepted;
          verifications += b->verifications;
          same = same && a->outputs == b->outputs;
        }
        std::printf("| %s | %d | %d | %.1f | %.1f | %.2fx | %.2f | %.2f | %s |\n", w.c_str(), n, k,
                    common::Percentile(off_tps, 0.5), common::Percentile(on_tps, 0.5),
                    common::Percentile(speedups, 0.5),
                    drafts > 0 ? static_cast<double>(accepted) / static_cast<double>(drafts) : 0.0,
                    verifications > 0
                        ? static_cast<double>(accepted) / static_cast<double>(verifications)
                        : 0.0,
                    same ? "yes" : "NO");
        std::fflush(stdout);
        if (!same) return absl::InternalError("greedy output differs with speculation");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

Subcommand SpeculativeCommand() {
  return {
      .name = "speculative",
      .summary = "tokens/s with and without speculative drafts, with the acceptance",
      .usage = kUsage,
      .file = __FILE__,
      .shared_flags = {{"model", "GGUF model file. Required."},
                       {"backend"},
                       {"threads", "Backend threads; 0 = all cores.", "2"},
                       {"streams", "Concurrent stream counts, comma-separated.", "1,16"},
                       {"max_tokens", "Tokens per stream (>= 2).", "128"},
                       {"repeats", "Alternated rounds; medians are reported.", "5"},
                       {"kv_dtype"},
                       {"blas_reexec"}},
      .run =
          [](char** argv) {
            backends::cpu_blas::EnsureBestBlasCore("kvserve-bench speculative",
                                                   absl::GetFlag(FLAGS_blas_reexec), argv);
            return Main();
          },
  };
}

}  // namespace kvserve::bench
