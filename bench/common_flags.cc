#include "bench/common_flags.h"

#include "absl/flags/flag.h"
#include "backends/cpu_blas/blas_startup.h"

namespace kvserve::bench {

bool AbslParseFlag(absl::string_view value, OptionalText* flag, std::string* /*error*/) {
  flag->text = std::string(value);
  return true;
}
std::string AbslUnparseFlag(const OptionalText& flag) { return flag.text.value_or(""); }

absl::string_view CommonFlagsFile() { return __FILE__; }

}  // namespace kvserve::bench

// The help texts are the general meaning; a subcommand that reads a flag differently (or
// has its own default) says so in its Subcommand::shared_flags.
ABSL_FLAG(std::string, model, "", "Model file (GGUF).");
ABSL_FLAG(std::string, tokenizer, "", "llama2.c tokenizer.bin (only for llama2.c checkpoints).");
ABSL_FLAG(std::string, backend, "cpu_blas", "Compute backend: cpu_blas or reference.");
ABSL_FLAG(std::string, kv_dtype, "f16", "KV cache element type: f16 or f32.");
ABSL_FLAG(bool, blas_reexec, true, kvserve::backends::cpu_blas::kBlasReexecFlagHelp);
ABSL_FLAG(std::optional<int32_t>, threads, std::nullopt, "Backend threads; 0 = all cores.");
ABSL_FLAG(int32_t, repeats, 5, "Timed runs per measurement; the median is reported.");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt, "Seed.");
ABSL_FLAG(bool, json, false, "One JSON object per result line, nothing else on stdout.");
ABSL_FLAG(std::optional<int32_t>, max_tokens, std::nullopt, "Tokens generated per request.");
ABSL_FLAG(std::optional<kvserve::bench::IntListFlag>, streams, std::nullopt, "Concurrent streams.");
ABSL_FLAG(kvserve::bench::IntListFlag, history, kvserve::bench::IntListFlag({1024, 4096}),
          "Session history lengths in tokens, comma-separated.");
ABSL_FLAG(kvserve::bench::OptionalText, prompt, {}, "Prompt text.");
ABSL_FLAG(kvserve::bench::OptionalText, text, {}, "Text.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating past end-of-sequence.");
ABSL_FLAG(bool, parse_special, false,
          "Turn control-token strings in the text (e.g. <|eot_id|>) into those tokens.");
ABSL_FLAG(int32_t, block_tokens, 16, "Positions (tokens) per KV block.");
ABSL_FLAG(std::optional<int32_t>, blocks, std::nullopt, "Block records per repeat.");
ABSL_FLAG(std::string, disk_dir, "", "Folder of the disk tier.");
