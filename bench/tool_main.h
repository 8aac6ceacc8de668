// The main() of kvserve-bench: one binary, one subcommand per measurement or offline tool
// (`kvserve-bench SUBCOMMAND [flags]`), one convention for flags, help, errors and exit
// status.
#ifndef KVSERVE_BENCH_TOOL_MAIN_H_
#define KVSERVE_BENCH_TOOL_MAIN_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/flags.h"

namespace kvserve::bench {

// A flag of bench/common_flags.h that a subcommand reads, with what it means there.
struct SharedFlagUse {
  absl::string_view name;           // e.g. "threads"
  absl::string_view help;           // empty: the flag's own help text
  absl::string_view default_value;  // empty: the flag's own default
};

// One subcommand. Its own flags are the ones defined in `file` (pass __FILE__ from the
// file that defines them); it may read no other flag than those and `shared_flags`.
struct Subcommand {
  absl::string_view name;     // e.g. "backend"
  absl::string_view summary;  // one line for `kvserve-bench --help`
  absl::string_view usage;    // what `kvserve-bench NAME --help` prints above the flags
  absl::string_view file;
  std::vector<SharedFlagUse> shared_flags;
  // A flag whose every occurrence adds one value (common::ParseFlags), or null.
  common::RepeatedFlag* repeated = nullptr;
  // Reads the flags and does the work. `argv` is main()'s, whole (a re-execution, as
  // backends::cpu_blas::EnsureBestBlasCore does, runs the same subcommand again).
  std::function<absl::Status(char** argv)> run;
};

// Runs `kvserve-bench SUBCOMMAND [flags]` with the subcommand named by argv[1]:
//   - no subcommand, an unknown one or a positional argument: a message on stderr, 2;
//   - `--help` or `-h` (alone: the subcommands; after a subcommand: its usage, own flags
//     and shared flags): printed on stdout, 0;
//   - a flag of another subcommand: refused with a message naming it, 2;
//   - flags are parsed by common::ParseFlags (dashed or underscored names; --version
//     prints `version()` and exits 0; an unknown flag or a malformed value: Abseil's
//     message, 1); then the subcommand runs. Its status gives the exit status: 0 when OK;
//     2 for INVALID_ARGUMENT (a flag missing or out of range) and NOT_FOUND (an input file
//     that is not there); 1 for any other error. An error is printed to stderr as
//     "<program> <subcommand>: <message>".
// Call it only from main().
int ToolMain(int argc, char** argv, absl::string_view program,
             absl::Span<const Subcommand> subcommands, std::function<std::string()> version);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_TOOL_MAIN_H_
