// kvserve-bench generate: offline text generation from one prompt, streamed to stdout.
//
//   kvserve-bench generate --model M [--tokenizer T] --prompt P [--max-tokens N]
//       [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R]
//       [--frequency-penalty F] [--presence-penalty P] [--seed S] [--stop STR]...
//       [--backend reference|cpu_blas] [--threads N] [--ignore-eos] [--kv-dtype f16|f32]
//       [--no-echo] [--parse-special]
//
// Prints the prompt and then the continuation as tokens arrive (like llama2.c's run);
// token counts and tokens/s go to stderr. --help lists every flag with its default.
// Exit status as for every kvserve-bench subcommand (bench/tool_main.h): 2 for a missing or
// invalid flag value, a missing model file or bad sampling parameters. This file only maps
// flags onto OfflineGenerateOptions (engine/offline_generate.h).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backends/backend.h"
#include "backends/cpu_blas/blas_startup.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "engine/offline_generate.h"
#include "engine/sampling_params.h"
#include "model/dtype.h"
#include "model/model.h"
#include "model/tokenizer.h"

ABSL_FLAG(float, temperature, kvserve::engine::SamplingParams().temperature,
          "Sampling temperature; 0 = greedy.");
ABSL_FLAG(int32_t, top_k, kvserve::engine::SamplingParams().top_k,
          "Keep the k most likely tokens; 0 = off.");
ABSL_FLAG(float, top_p, kvserve::engine::SamplingParams().top_p,
          "Nucleus sampling in (0, 1]; 1 = off.");
ABSL_FLAG(float, min_p, kvserve::engine::SamplingParams().min_p,
          "Drop tokens with p < min_p * p_max; 0 = off.");
ABSL_FLAG(float, repetition_penalty, kvserve::engine::SamplingParams().repetition_penalty,
          "CTRL-style penalty over prompt and output, > 0; 1 = off.");
ABSL_FLAG(float, frequency_penalty, kvserve::engine::SamplingParams().frequency_penalty,
          "Subtract f * count(token in output), in [-2, 2].");
ABSL_FLAG(float, presence_penalty, kvserve::engine::SamplingParams().presence_penalty,
          "Subtract p if the token occurred in the output, in [-2, 2].");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "Stop string (not printed). Repeat the flag for several; each value is taken "
          "whole, commas included.");
ABSL_FLAG(bool, no_echo, false, "Do not print the prompt before the continuation.");

namespace {

using kvserve::engine::FinishReason;
using kvserve::engine::OfflineGenerateOptions;

constexpr char kUsage[] =
    "Offline text generation from one prompt, streamed to stdout (token counts and "
    "tokens/s on stderr).\n"
    "Usage: kvserve-bench generate --model M [--tokenizer T] --prompt P [flags]\n"
    "Flags accept - or _ (--max-tokens or --max_tokens).";

const char* FinishName(FinishReason finish) {
  switch (finish) {
    case FinishReason::kStop:
      return "end of text or stop token";
    case FinishReason::kStopString:
      return "stop string";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
    case FinishReason::kDeadline:
    case FinishReason::kError:
      break;  // offline generation never ends so
  }
  return "unknown";
}

// The parsed flags as generation options; INVALID_ARGUMENT names the flag at fault.
absl::StatusOr<OfflineGenerateOptions> OptionsFromFlags() {
  if (absl::GetFlag(FLAGS_model).empty()) return absl::InvalidArgumentError("--model is required");
  if (!absl::GetFlag(FLAGS_prompt).text.has_value()) {
    return absl::InvalidArgumentError("--prompt is required");
  }
  OfflineGenerateOptions options;
  kvserve::engine::SamplingParams& sampling = options.sampling;
  sampling.max_tokens = absl::GetFlag(FLAGS_max_tokens).value_or(sampling.max_tokens);
  sampling.temperature = absl::GetFlag(FLAGS_temperature);
  sampling.top_k = absl::GetFlag(FLAGS_top_k);
  sampling.top_p = absl::GetFlag(FLAGS_top_p);
  sampling.min_p = absl::GetFlag(FLAGS_min_p);
  sampling.repetition_penalty = absl::GetFlag(FLAGS_repetition_penalty);
  sampling.frequency_penalty = absl::GetFlag(FLAGS_frequency_penalty);
  sampling.presence_penalty = absl::GetFlag(FLAGS_presence_penalty);
  sampling.seed = absl::GetFlag(FLAGS_seed);
  sampling.stop_strings = absl::GetFlag(FLAGS_stop);
  sampling.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  options.backend = absl::GetFlag(FLAGS_backend);
  options.threads = absl::GetFlag(FLAGS_threads).value_or(0);
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be >= 0 (0 = all cores), got ", options.threads));
  }
  absl::StatusOr<kvserve::model::DType> kv_dtype =
      kvserve::model::KvDTypeFromName(absl::GetFlag(FLAGS_kv_dtype), "--kv_dtype");
  if (!kv_dtype.ok()) return kv_dtype.status();
  options.kv_dtype = *kv_dtype;
  options.echo_prompt = !absl::GetFlag(FLAGS_no_echo);
  options.parse_special = absl::GetFlag(FLAGS_parse_special);
  if (!sampling.seed.has_value()) {
    std::random_device device;
    options.fallback_seed = (static_cast<uint64_t>(device()) << 32) | device();
  }
  return options;
}

void WriteText(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// Generates and prints; the statistics go to stderr.
absl::Status Generate(char** argv) {
  kvserve::backends::cpu_blas::EnsureBestBlasCore("kvserve-bench generate",
                                                  absl::GetFlag(FLAGS_blas_reexec), argv);
  absl::StatusOr<OfflineGenerateOptions> options = OptionsFromFlags();
  if (!options.ok()) return options.status();
  // Packed where the backend reads panels and the file's bytes handed back, as the server
  // loads (engine::LoadModel): otherwise the backend packs copies of its own and the
  // weights are resident twice (a 16.7 GB file then did not fit 24 GiB).
  const kvserve::model::LoadOptions load{.panels = kvserve::backends::BackendReadsPanels(
                                             options->backend, {.threads = options->threads})};
  absl::StatusOr<std::unique_ptr<kvserve::model::Model>> model =
      kvserve::model::Model::Load(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_tokenizer), load);
  if (!model.ok()) return model.status();
  absl::StatusOr<std::unique_ptr<kvserve::model::Tokenizer>> tokenizer =
      kvserve::model::Tokenizer::Create((*model)->vocab());
  if (!tokenizer.ok()) return tokenizer.status();

  absl::StatusOr<kvserve::engine::OfflineGenerateResult> result = kvserve::engine::GenerateOffline(
      **model, **tokenizer, *absl::GetFlag(FLAGS_prompt).text, *options, WriteText);
  if (!result.ok()) return result.status();
  WriteText("\n");

  const size_t generated = result->generated_tokens.size();
  const double prefill_tps =
      result->prefill_seconds > 0 ? result->prompt_tokens.size() / result->prefill_seconds : 0.0;
  const double decode_tps =
      generated > 1 && result->decode_seconds > 0 ? (generated - 1) / result->decode_seconds : 0.0;
  std::fprintf(stderr,
               "prompt tokens: %zu, generated tokens: %zu (finish: %s)\n"
               "prefill: %.1f tokens/s (%.3f ms), decode: %.1f tokens/s (%zu steps, %.3f ms)\n",
               result->prompt_tokens.size(), generated, FinishName(result->finish), prefill_tps,
               result->prefill_seconds * 1e3, decode_tps, generated > 0 ? generated - 1 : 0,
               result->decode_seconds * 1e3);
  return absl::OkStatus();
}

}  // namespace

namespace kvserve::bench {

Subcommand GenerateCommand() {
  static const std::string kDefaultMaxTokens = absl::StrCat(engine::SamplingParams().max_tokens);
  return {
      .name = "generate",
      .summary = "offline text generation from one prompt, streamed to stdout",
      .usage = kUsage,
      .file = __FILE__,
      .shared_flags =
          {{"model", "Model file: GGUF, or a llama2.c checkpoint with --tokenizer. Required."},
           {"tokenizer"},
           {"prompt", "The prompt text. Required (may be empty: then generation starts from BOS)."},
           {"max_tokens", "Tokens to generate at most.", kDefaultMaxTokens},
           {"seed", "Sampling seed; unset = seeded randomly."},
           {"backend"},
           {"threads", "Backend worker threads; 0 = all cores.", "0"},
           {"ignore_eos"},
           {"kv_dtype", "Element type of cached K/V: f16 or f32."},
           {"parse_special",
            "Turn control-token strings in the prompt (e.g. <|eot_id|>) into those tokens."},
           {"blas_reexec"}},
      .repeated = &FLAGS_stop,
      .run = Generate,
  };
}

}  // namespace kvserve::bench
