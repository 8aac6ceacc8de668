#include "bench/tool_main.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/flags.h"

namespace kvserve::bench {

int ToolMain(int argc, char** argv, std::string_view name, std::string_view usage,
             std::string_view main_file, absl::FunctionRef<absl::Status()> run,
             std::function<std::string()> version) {
  const std::string program(name);
  const std::vector<std::string> args =
      common::ParseFlags(argc, argv, usage, main_file, {}, std::move(version));
  if (args.size() > 1) {
    std::fprintf(stderr, "%s: unexpected argument \"%s\" (see --help)\n", program.c_str(),
                 args[1].c_str());
    return 2;
  }
  const absl::Status status = run();
  if (status.ok()) return 0;
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), std::string(status.message()).c_str());
    return 2;
  }
  std::fprintf(stderr, "%s: %s\n", program.c_str(), status.ToString().c_str());
  return 1;
}

}  // namespace kvserve::bench
