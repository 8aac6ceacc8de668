// The flags several kvserve-bench subcommands read. Abseil flags are process-wide, so a
// name two subcommands use is defined once, here; each subcommand lists the ones it reads
// (Subcommand::shared_flags, with what they mean there) and leaves the rest alone. Where
// the subcommands' defaults differ, the flag is a std::optional and each applies its own
// (`absl::GetFlag(FLAGS_threads).value_or(2)`). Flags only one subcommand reads are
// defined in its own file.
#ifndef KVSERVE_BENCH_COMMON_FLAGS_H_
#define KVSERVE_BENCH_COMMON_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/flags/declare.h"
#include "absl/strings/string_view.h"
#include "bench/tool_flags.h"

namespace kvserve::bench {

// A text flag that may be unset (--prompt, --text): any text, the empty text included,
// once given.
struct OptionalText {
  std::optional<std::string> text;
};
bool AbslParseFlag(absl::string_view value, OptionalText* flag, std::string* error);
std::string AbslUnparseFlag(const OptionalText& flag);

// The file defining the flags below (the name their CommandLineFlag::Filename() gives).
absl::string_view CommonFlagsFile();

}  // namespace kvserve::bench

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, tokenizer);
ABSL_DECLARE_FLAG(std::string, backend);
ABSL_DECLARE_FLAG(std::string, kv_dtype);
ABSL_DECLARE_FLAG(bool, blas_reexec);
ABSL_DECLARE_FLAG(std::optional<int32_t>, threads);
ABSL_DECLARE_FLAG(int32_t, repeats);
ABSL_DECLARE_FLAG(std::optional<uint64_t>, seed);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(std::optional<int32_t>, max_tokens);
ABSL_DECLARE_FLAG(std::optional<kvserve::bench::IntListFlag>, streams);
ABSL_DECLARE_FLAG(kvserve::bench::IntListFlag, history);
ABSL_DECLARE_FLAG(kvserve::bench::OptionalText, prompt);
ABSL_DECLARE_FLAG(kvserve::bench::OptionalText, text);
ABSL_DECLARE_FLAG(bool, ignore_eos);
ABSL_DECLARE_FLAG(bool, parse_special);
ABSL_DECLARE_FLAG(int32_t, block_tokens);
ABSL_DECLARE_FLAG(std::optional<int32_t>, blocks);
ABSL_DECLARE_FLAG(std::string, disk_dir);

#endif  // KVSERVE_BENCH_COMMON_FLAGS_H_
