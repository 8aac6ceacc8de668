// kvserve-bench mkmodel: writes a llama, qwen2 or qwen3 GGUF with seeded random weights at a
// preset shape.
//   kvserve-bench mkmodel --preset NAME --dtype
//   f32|f16|bf16|q8_0|q4_0|q5_0|q5_1|q4_k|q5_k|q6_k|q4_k_m --out FILE
//   [--seed N] [--arch A]
// Exit status as for every kvserve-bench subcommand (bench/tool_main.h).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "bench/synthetic_model.h"
#include "model/dtype.h"

ABSL_FLAG(std::string, preset, "",
          "Model shape: tiny (tests), s110m, smol135m (tied embeddings), "
          "tl1b, l3-1b (Llama 3.2 1B shape, tied), q3moe-mini (Qwen3-30B-A3B's experts at a "
          "smaller width and depth; --arch qwen3moe), youtu2b (Youtu-LLM-2B's shape with "
          "latent attention; --arch deepseek2) or deepseek-v2-lite (DeepSeek-V2-Lite's shape: "
          "latent attention, 64 experts, 6 per token, 2 shared; --arch deepseek2). Required.");
ABSL_FLAG(std::string, dtype, "",
          "Matrix element type: f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_k, q5_k, q6_k, or "
          "q4_k_m (llama.cpp's "
          "Q4_K_M mix of q4_k and q6_k). Required.");
ABSL_FLAG(std::string, out, "", "The GGUF file to write. Required.");
ABSL_FLAG(int32_t, context_length, 0,
          "Context length written into the file; 0 = the preset's (e.g. 2048 for s110m).");
ABSL_FLAG(std::string, arch, "llama",
          "Architecture: llama, qwen2 (Q/K/V biases, rotate-halves RoPE), qwen3 (Q/K norms, "
          "rotate-halves RoPE), qwen3moe (qwen3 with experts: the preset's, else 8 of the "
          "preset's FFN size, 2 per token) or deepseek2 (multi-head latent attention and "
          "experts: the preset's, else head_dim + head_dim / 2 RoPE dims per query head, a "
          "latent and compressed query of dim / 2, a dense first layer, then 8 experts of half "
          "the preset's FFN size, 2 per token, and 2 shared experts).");
ABSL_FLAG(bool, llama_biases, false, "llama only: add Q/K/V and output-projection biases.");
ABSL_FLAG(bool, tied, false, "Tie the LM head to the token embedding (omit output.weight).");
ABSL_FLAG(float, rope_freq_base, 0.0f, "RoPE base (rope.freq_base); 0 = the preset's (10000).");
ABSL_FLAG(float, rope_llama3_factor, 0.0f,
          "llama only: write Llama 3.x RoPE factors (rope_freqs) for rope_scaling llama3 with "
          "this factor (low 1, high 4, original context 8192); 0 = the preset's (none except "
          "l3-1b).");
ABSL_FLAG(float, rope_scale_linear, 0.0f,
          "Linear RoPE scaling factor (rope.scaling.type linear, rope.scaling.factor); 0 = none.");
ABSL_FLAG(float, rope_yarn_factor, 0.0f,
          "YaRN RoPE scaling factor (rope.scaling.type yarn, rope.scaling.factor); 0 = none.");
ABSL_FLAG(int32_t, rope_yarn_orig_ctx, 0,
          "With --rope_yarn_factor: rope.scaling.original_context_length, the context before "
          "scaling; 0 = not written (readers take context_length).");
ABSL_FLAG(float, rope_yarn_log_multiplier, 0.0f,
          "deepseek2 with --rope_yarn_factor: the mscale_all_dim of DeepSeek's YaRN "
          "(written times 0.1 as rope.scaling.yarn_log_multiplier, as llama.cpp's converter "
          "does); 0 = none.");
ABSL_FLAG(int32_t, sliding_window, 0,
          "attention.sliding_window (local attention; llama.cpp ignores it for these "
          "architectures); 0 = none.");
ABSL_FLAG(float, weight_std, 0.02f,
          "Standard deviation of the random matrices; larger values spread the logits apart "
          "(0.02 suits the presets' activations).");

namespace {

constexpr char kUsage[] =
    R"(Usage: kvserve-bench mkmodel --preset NAME --dtype f32|f16|bf16|q8_0|q4_0|q5_0|q5_1|q4_k|q5_k|q6_k|q4_k_m
                       --out FILE [--seed N] [--context_length N] [--arch llama|qwen2|qwen3|qwen3moe|deepseek2]
                       [--tied] [--llama_biases] [--rope_freq_base F] [--rope_llama3_factor F]
                       [--rope_scale_linear F] [--rope_yarn_factor F [--rope_yarn_orig_ctx N]
                        [--rope_yarn_log_multiplier F]] [--sliding_window N] [--weight_std F]

Writes a valid GGUF (loadable by kvserve and llama.cpp) with random weights,
approximately N(0, weight_std^2), norm gains 1.0, and a byte-fallback SentencePiece
vocabulary.)";

// The YaRN flags onto `config` (`linear`: --rope_scale_linear was given).
absl::Status ApplyYarnFlags(const std::string& arch, bool linear,
                            kvserve::model::ModelConfig& config) {
  const float factor = absl::GetFlag(FLAGS_rope_yarn_factor);
  const int32_t orig = absl::GetFlag(FLAGS_rope_yarn_orig_ctx);
  const float log_multiplier = absl::GetFlag(FLAGS_rope_yarn_log_multiplier);
  if (factor < 0.0f || orig < 0) {
    return absl::InvalidArgumentError("--rope_yarn_factor and --rope_yarn_orig_ctx must be >= 0");
  }
  if (factor == 0.0f) {
    if (orig != 0 || log_multiplier != 0.0f) {
      return absl::InvalidArgumentError(
          "--rope_yarn_orig_ctx and --rope_yarn_log_multiplier need --rope_yarn_factor");
    }
    return absl::OkStatus();
  }
  if (linear) {
    return absl::InvalidArgumentError(
        "--rope_yarn_factor and --rope_scale_linear exclude each other");
  }
  if (log_multiplier != 0.0f && arch != "deepseek2") {
    return absl::InvalidArgumentError("--rope_yarn_log_multiplier needs --arch deepseek2");
  }
  config.rope_freq_scale = 1.0f / factor;
  config.yarn_ext_factor = 1.0f;
  config.yarn_orig_context_length = orig;
  config.yarn_log_multiplier = log_multiplier;
  return absl::OkStatus();
}

// The architecture and RoPE flags onto `config`.
absl::Status ApplyFeatureFlags(kvserve::model::ModelConfig& config) {
  namespace bench = kvserve::bench;
  const std::string arch = absl::GetFlag(FLAGS_arch);
  if (absl::Status s = bench::ApplyArchitecture(arch, config); !s.ok()) return s;
  if (absl::GetFlag(FLAGS_tied)) config.tied_embeddings = true;
  if (absl::GetFlag(FLAGS_llama_biases)) {
    if (arch != "llama") return absl::InvalidArgumentError("--llama_biases needs --arch llama");
    config.attention_qkv_bias = true;
    config.attention_output_bias = true;
  }
  const float base = absl::GetFlag(FLAGS_rope_freq_base);
  if (base < 0.0f) return absl::InvalidArgumentError("--rope_freq_base must be >= 0");
  if (base > 0.0f) config.rope_base = base;
  if (arch != "llama") config.rope_freq_factors.clear();  // llama.cpp reads them for llama only
  const float llama3 = absl::GetFlag(FLAGS_rope_llama3_factor);
  if (llama3 < 0.0f) return absl::InvalidArgumentError("--rope_llama3_factor must be >= 0");
  if (llama3 > 0.0f) {
    if (arch != "llama") {
      return absl::InvalidArgumentError("--rope_llama3_factor needs --arch llama");
    }
    config.rope_freq_factors = bench::Llama3RopeFactors(config.rope_base, config.rope_dim, llama3);
  }
  const float linear = absl::GetFlag(FLAGS_rope_scale_linear);
  if (linear < 0.0f) return absl::InvalidArgumentError("--rope_scale_linear must be >= 0");
  if (linear > 0.0f) config.rope_freq_scale = 1.0f / linear;
  if (absl::Status s = ApplyYarnFlags(arch, linear > 0.0f, config); !s.ok()) return s;
  const int32_t window = absl::GetFlag(FLAGS_sliding_window);
  if (window < 0) return absl::InvalidArgumentError("--sliding_window must be >= 0");
  config.sliding_window = window;
  return config.Validate();
}

absl::Status Run() {
  namespace bench = kvserve::bench;
  namespace model = kvserve::model;
  const std::string preset = absl::GetFlag(FLAGS_preset);
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (preset.empty() || dtype.empty() || out.empty()) {
    return absl::InvalidArgumentError("--preset, --dtype and --out are required");
  }
  absl::StatusOr<model::ModelConfig> config = bench::PresetConfig(preset);
  if (!config.ok()) return config.status();
  const int32_t context_length = absl::GetFlag(FLAGS_context_length);
  if (context_length < 0 || context_length > (1 << 20)) {
    return absl::InvalidArgumentError("--context_length must be in [0, 1048576]");
  }
  if (context_length > 0) config->context_length = context_length;
  if (absl::Status s = ApplyFeatureFlags(*config); !s.ok()) return s;
  bench::SyntheticModelOptions options;
  options.config = *config;
  options.seed = absl::GetFlag(FLAGS_seed).value_or(1);
  options.weight_std = absl::GetFlag(FLAGS_weight_std);
  if (!(options.weight_std > 0.0f) || options.weight_std > 1.0f) {
    return absl::InvalidArgumentError("--weight_std must be in (0, 1]");
  }
  options.name = absl::StrCat("kvserve-synthetic-", preset);
  const std::optional<model::DType> matrix_dtype = model::DTypeFromName(dtype);
  if (dtype == "q4_k_m") {
    options.mix = bench::QuantMix::kQ4_K_M;
  } else if (matrix_dtype.has_value()) {
    options.dtype = *matrix_dtype;
  } else {
    return absl::InvalidArgumentError(
        "--dtype must be f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_k, q5_k, q6_k or q4_k_m, not " +
        dtype);
  }
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = bench::WriteSyntheticModel(options, out); !s.ok()) return s;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "kvserve-bench mkmodel: wrote %s (%s, %s) in %.1f s\n", out.c_str(),
               preset.c_str(), dtype.c_str(), seconds);
  return absl::OkStatus();
}

}  // namespace

namespace kvserve::bench {

Subcommand MkmodelCommand() {
  return {
      .name = "mkmodel",
      .summary = "write a GGUF with seeded random weights at a preset shape",
      .usage = kUsage,
      .file = __FILE__,
      .shared_flags = {{"seed", "Weight seed: same seed, same bytes.", "1"}},
      .run = [](char**) { return Run(); },
  };
}

}  // namespace kvserve::bench
