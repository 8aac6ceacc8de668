// kvserve-mkmodel: writes a llama GGUF with seeded random weights at a preset shape.
//   kvserve-mkmodel --preset NAME --dtype f32|f16|bf16|q8_0|q4_0|q4_k|q6_k|q4_k_m --out FILE
//   [--seed N]
// Exit status as for every bench tool (bench/tool_main.h).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/synthetic_model.h"
#include "bench/tool_main.h"
#include "model/dtype.h"

ABSL_FLAG(std::string, preset, "",
          "Model shape: tiny (tests), s110m, smol135m (tied embeddings) "
          "or tl1b. Required.");
ABSL_FLAG(std::string, dtype, "",
          "Matrix element type: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, or q4_k_m (llama.cpp's "
          "Q4_K_M mix of q4_k and q6_k). Required.");
ABSL_FLAG(std::string, out, "", "The GGUF file to write. Required.");
ABSL_FLAG(uint64_t, seed, 1, "Weight seed: same seed, same bytes.");
ABSL_FLAG(int32_t, context_length, 0,
          "Context length written into the file; 0 = the preset's (e.g. 2048 for s110m).");

namespace {

constexpr char kUsage[] =
    R"(Usage: kvserve-mkmodel --preset NAME --dtype f32|f16|bf16|q8_0|q4_0|q4_k|q6_k|q4_k_m --out FILE [--seed N]
                       [--context_length N]

Writes a valid llama GGUF (loadable by kvserve and llama.cpp) with random weights,
approximately N(0, 0.02^2), norm gains 1.0, and a byte-fallback SentencePiece vocabulary.)";

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
  bench::SyntheticModelOptions options;
  options.config = *config;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.name = absl::StrCat("kvserve-synthetic-", preset);
  const std::optional<model::DType> matrix_dtype = model::DTypeFromName(dtype);
  if (dtype == "q4_k_m") {
    options.mix = bench::QuantMix::kQ4_K_M;
  } else if (matrix_dtype.has_value()) {
    options.dtype = *matrix_dtype;
  } else {
    return absl::InvalidArgumentError(
        "--dtype must be f32, f16, bf16, q8_0, q4_0, q4_k, q6_k or q4_k_m, not " + dtype);
  }
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = bench::WriteSyntheticModel(options, out); !s.ok()) return s;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "kvserve-mkmodel: wrote %s (%s, %s) in %.1f s\n", out.c_str(),
               preset.c_str(), dtype.c_str(), seconds);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return kvserve::bench::ToolMain(argc, argv, "kvserve-mkmodel", kUsage, "mkmodel_main.cc", Run);
}
