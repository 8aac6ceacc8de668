#include "common/flags.h"

#include <algorithm>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace kvserve::common {

std::vector<std::string> ParseFlags(int argc, char** argv, std::string_view usage,
                                    std::string_view main_file) {
  absl::FlagsUsageConfig config;
  const std::string file(main_file);
  config.contains_help_flags = [file](absl::string_view path) {
    return absl::EndsWith(path, file);
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(std::string(usage));

  std::vector<std::string> normalized(argv, argv + argc);
  std::vector<char*> normalized_argv;
  for (std::string& arg : normalized) {
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      const size_t name_end = std::min(arg.find('='), arg.size());
      std::replace(arg.begin() + 2, arg.begin() + static_cast<std::ptrdiff_t>(name_end), '-', '_');
    }
    normalized_argv.push_back(arg.data());
  }
  std::vector<char*> args =
      absl::ParseCommandLine(static_cast<int>(normalized_argv.size()), normalized_argv.data());
  return std::vector<std::string>(args.begin(), args.end());
}

}  // namespace kvserve::common
