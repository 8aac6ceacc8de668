// Command-line parsing shared by the kvserve binaries (only *_main.cc files call it).
#ifndef KVSERVE_COMMON_FLAGS_H_
#define KVSERVE_COMMON_FLAGS_H_

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"

namespace kvserve::common {

// A flag that may be given several times, each occurrence adding one value, e.g.
// `kvserve-bench generate`'s --stop. Define it as ABSL_FLAG(std::vector<std::string>, name, {},
// help) (so --help lists it) and pass &FLAGS_name to ParseFlags.
using RepeatedFlag = absl::Flag<std::vector<std::string>>;

// Parses argv with Abseil flags. Before parsing, "--dashed-name[=v]" is rewritten to
// "--dashed_name[=v]" so both spellings work (absl flag names use '_'), and "-h" to
// "--help". `usage` becomes the program usage message; --help lists only the flags defined
// in files whose name ends with `main_file` (e.g. "server_main.cc"), in its companion flag
// file (the same name ending "_flags.cc": "server_flags.cc"), or in a "server/*_flags.cc"
// file (the flags both servers share), and exits 1 (Abseil).
// Every occurrence of a `repeated` flag ("--name V" or "--name=V", either spelling) is
// taken out of argv before Abseil sees it; if there was any, the flag is set to the values
// in order, each kept whole (a comma is no separator). Returns the positional arguments,
// argv[0] first. Unknown flags or bad values (also a repeated flag without a value) print
// a message and exit(1): call it only from main().
// --version (Abseil's built-in flag) prints `version()` on stdout and exits 0; `version`
// runs after every flag is parsed, so it may read them. Null: "<program> <version>\n"
// "commit: <git commit>\n" (common/build_version.h; program = argv[0]'s file name).
std::vector<std::string> ParseFlags(int argc, char** argv, std::string_view usage,
                                    std::string_view main_file,
                                    std::initializer_list<RepeatedFlag*> repeated = {},
                                    std::function<std::string()> version = nullptr);

// The one shape of a server's main() (kvserve, kvserve-cache): ParseFlags (no repeated
// flags); a positional argument is an error ("<program>: unexpected argument "X" (see
// --help)", exit 2); then `run`. Its status becomes the exit code: OK 0, INVALID_ARGUMENT
// 2 (a bad flag or option), anything else 1, the message printed as "<program>: MESSAGE"
// on stderr. A message that starts with the name of one of the binary's flags (followed by
// ' ' or ':', with '-' or '_': the options' convention, "max-threads must be >= 2") is
// printed with "--" in front, so the user sees the flag ("--max-threads must be >= 2").
int RunFlagsOnlyMain(int argc, char** argv, std::string_view program, std::string_view usage,
                     std::string_view main_file, std::function<std::string()> version,
                     const std::function<absl::Status()>& run);

}  // namespace kvserve::common

#endif  // KVSERVE_COMMON_FLAGS_H_
