// kvserve-generate: offline text generation from one prompt, streamed to stdout.
//
//   kvserve-generate --model M [--tokenizer T] --prompt P [--max-tokens N]
//       [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R]
//       [--frequency-penalty F] [--presence-penalty P] [--seed S] [--stop STR]...
//       [--backend reference|cpu_blas] [--threads N] [--ignore-eos] [--kv-dtype f32|f16]
//       [--no-echo]
//
// Prints the prompt and then the continuation as tokens arrive (like llama2.c's run);
// token counts and tokens/s go to stderr. Exit status: 0 on success, 2 for a bad flag or
// an unreadable model, 1 when generation itself fails.
// This file only maps flags onto OfflineGenerateOptions (engine/offline_generate.h).
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/offline_generate.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace {

using kvserve::engine::FinishReason;
using kvserve::engine::OfflineGenerateOptions;

constexpr char kUsage[] =
    "usage: kvserve-generate --model M [--tokenizer T] --prompt P [--max-tokens N]\n"
    "         [--temperature T] [--top-k K] [--top-p P] [--min-p P]\n"
    "         [--repetition-penalty R] [--frequency-penalty F] [--presence-penalty P]\n"
    "         [--seed S] [--stop STR]... [--backend reference|cpu_blas] [--threads N]\n"
    "         [--ignore-eos] [--kv-dtype f32|f16] [--no-echo]\n"
    "Defaults: --max-tokens 256 --temperature 1 (0 = greedy) --top-k 0 --top-p 1\n"
    "          --min-p 0 --backend cpu_blas --threads 0 (all cores) --kv-dtype f32;\n"
    "          without --seed the RNG is seeded randomly.\n";

struct Flags {
  std::string model;
  std::string tokenizer;
  std::string prompt;
  bool have_prompt = false;
  bool help = false;
  OfflineGenerateOptions options;
};

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

// Parses argv into `flags`. Accepts "--name value" and "--name=value".
absl::Status ParseFlags(int argc, char** argv, Flags* flags) {
  kvserve::engine::SamplingParams& sampling = flags->options.sampling;
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    std::string value;
    bool has_inline_value = false;
    if (name.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", name, "\""));
    }
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_inline_value = true;
    }
    // Boolean flags.
    if (name == "--ignore-eos" || name == "--no-echo" || name == "--help") {
      if (has_inline_value) {
        return absl::InvalidArgumentError(absl::StrCat(name, " takes no value"));
      }
      if (name == "--ignore-eos") sampling.ignore_eos = true;
      if (name == "--no-echo") flags->options.echo_prompt = false;
      if (name == "--help") {
        flags->help = true;
        return absl::OkStatus();
      }
      continue;
    }
    if (!has_inline_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      value = argv[++i];
    }
    auto bad_value = [&name, &value]() {
      return absl::InvalidArgumentError(absl::StrCat(name, ": bad value \"", value, "\""));
    };
    int32_t int_value = 0;
    uint64_t u64_value = 0;
    float float_value = 0.0f;
    if (name == "--model") {
      flags->model = value;
    } else if (name == "--tokenizer") {
      flags->tokenizer = value;
    } else if (name == "--prompt") {
      flags->prompt = value;
      flags->have_prompt = true;
    } else if (name == "--stop") {
      sampling.stop_strings.push_back(value);
    } else if (name == "--backend") {
      flags->options.backend = value;
    } else if (name == "--kv-dtype") {
      if (value == "f32") {
        flags->options.kv_dtype = kvserve::model::DType::kF32;
      } else if (value == "f16") {
        flags->options.kv_dtype = kvserve::model::DType::kF16;
      } else {
        return bad_value();
      }
    } else if (name == "--seed") {
      if (!absl::SimpleAtoi(value, &u64_value)) return bad_value();
      sampling.seed = u64_value;
    } else if (name == "--max-tokens" || name == "--top-k" || name == "--threads") {
      if (!absl::SimpleAtoi(value, &int_value)) return bad_value();
      if (name == "--max-tokens") sampling.max_tokens = int_value;
      if (name == "--top-k") sampling.top_k = int_value;
      if (name == "--threads") {
        if (int_value < 0) return bad_value();
        flags->options.threads = int_value;
      }
    } else if (name == "--temperature" || name == "--top-p" || name == "--min-p" ||
               name == "--repetition-penalty" || name == "--frequency-penalty" ||
               name == "--presence-penalty") {
      if (!absl::SimpleAtof(value, &float_value)) return bad_value();
      if (name == "--temperature") sampling.temperature = float_value;
      if (name == "--top-p") sampling.top_p = float_value;
      if (name == "--min-p") sampling.min_p = float_value;
      if (name == "--repetition-penalty") sampling.repetition_penalty = float_value;
      if (name == "--frequency-penalty") sampling.frequency_penalty = float_value;
      if (name == "--presence-penalty") sampling.presence_penalty = float_value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", name));
    }
  }
  if (flags->model.empty()) return absl::InvalidArgumentError("--model is required");
  if (!flags->have_prompt) return absl::InvalidArgumentError("--prompt is required");
  return absl::OkStatus();
}

void WriteText(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (absl::Status status = ParseFlags(argc, argv, &flags); !status.ok()) {
    std::fprintf(stderr, "kvserve-generate: %s\n%s", std::string(status.message()).c_str(), kUsage);
    return 2;
  }
  if (flags.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!flags.options.sampling.seed.has_value()) {
    std::random_device device;
    flags.options.fallback_seed = (static_cast<uint64_t>(device()) << 32) | device();
  }

  absl::StatusOr<std::unique_ptr<kvserve::model::Model>> model =
      kvserve::model::Model::Load(flags.model, flags.tokenizer);
  if (!model.ok()) {
    std::fprintf(stderr, "kvserve-generate: %s\n", model.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<kvserve::model::Tokenizer>> tokenizer =
      kvserve::model::Tokenizer::Create((*model)->vocab());
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "kvserve-generate: %s\n", tokenizer.status().ToString().c_str());
    return 2;
  }

  absl::StatusOr<kvserve::engine::OfflineGenerateResult> result = kvserve::engine::GenerateOffline(
      **model, **tokenizer, flags.prompt, flags.options, WriteText);
  if (!result.ok()) {
    std::fprintf(stderr, "kvserve-generate: %s\n", result.status().ToString().c_str());
    // Bad parameters or an unknown backend are the caller's input; the rest is ours.
    const absl::StatusCode code = result.status().code();
    return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound ? 2
                                                                                             : 1;
  }
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
  return 0;
}
