// Command-line parsing shared by the kvserve binaries (only *_main.cc files call it).
#ifndef KVSERVE_COMMON_FLAGS_H_
#define KVSERVE_COMMON_FLAGS_H_

#include <string>
#include <string_view>
#include <vector>

namespace kvserve::common {

// Parses argv with Abseil flags. Before parsing, "--dashed-name[=v]" is rewritten to
// "--dashed_name[=v]" so both spellings work (absl flag names use '_'). `usage` becomes
// the program usage message; --help lists only the flags defined in files whose name ends
// with `main_file` (e.g. "server_main.cc"). Returns the positional arguments, argv[0]
// first. Unknown flags or bad values print a message and exit(1) inside Abseil: call it
// only from main().
std::vector<std::string> ParseFlags(int argc, char** argv, std::string_view usage,
                                    std::string_view main_file);

}  // namespace kvserve::common

#endif  // KVSERVE_COMMON_FLAGS_H_
