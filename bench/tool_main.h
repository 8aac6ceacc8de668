// The main() of the bench tools (kvserve-bench, kvserve-mkmodel, kvserve-engine-bench):
// one convention for flags, errors and exit status.
#ifndef KVSERVE_BENCH_TOOL_MAIN_H_
#define KVSERVE_BENCH_TOOL_MAIN_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace kvserve::bench {

// Parses the flags with common::ParseFlags (dashed or underscored names; --help prints
// `usage` and the flags defined in files whose name ends with `main_file`), refuses
// positional arguments, then calls `run`, which reads the flags and does the work. An
// error is printed to stderr as "<name>: <message>". Returns the exit status: 0 on
// success; 2 for a positional argument or an INVALID_ARGUMENT from `run` (a flag missing
// or out of range); 1 for any other error. Abseil itself exits 1 for an unknown flag or a
// malformed value. --version prints `version()` (null: name, release and commit; see
// common::ParseFlags) and exits 0. Call it only from main().
int ToolMain(int argc, char** argv, std::string_view name, std::string_view usage,
             std::string_view main_file, absl::FunctionRef<absl::Status()> run,
             std::function<std::string()> version = nullptr);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_TOOL_MAIN_H_
