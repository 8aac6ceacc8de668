#include "common/flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/build_version.h"

namespace kvserve::common {
namespace {

// "--dashed-name[=v]" -> "--dashed_name[=v]", "-h" -> "--help"; anything else is
// returned unchanged.
std::string Normalize(std::string arg) {
  if (arg == "-h") return "--help";
  if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
    const size_t name_end = std::min(arg.find('='), arg.size());
    std::replace(arg.begin() + 2, arg.begin() + static_cast<std::ptrdiff_t>(name_end), '-', '_');
  }
  return arg;
}

// Takes every occurrence of the `repeated` flags out of `args` (normalized, argv[0]
// first) and returns their values, one list per flag. Mirrors Abseil: "--name value"
// consumes the next argument, also for other flags that take a value (so a value that
// looks like "--stop" is never taken for one); nothing after "--" is a flag.
std::vector<std::vector<std::string>> TakeRepeated(std::vector<std::string>& args,
                                                   const std::vector<std::string>& names) {
  std::vector<std::vector<std::string>> values(names.size());
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (i == 0 || arg == "--" || arg.size() < 2 || arg[0] != '-') {
      kept.push_back(arg);
      if (arg == "--") {
        kept.insert(kept.end(), args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
        break;
      }
      continue;
    }
    const size_t dashes = arg[1] == '-' ? 2 : 1;
    const size_t eq = arg.find('=');
    const std::string name =
        arg.substr(dashes, eq == std::string::npos ? std::string::npos : eq - dashes);
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      kept.push_back(arg);
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (eq == std::string::npos && flag != nullptr && !flag->IsOfType<bool>() &&
          i + 1 < args.size()) {
        kept.push_back(args[++i]);
      }
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      std::fprintf(stderr, "ERROR: Missing the value for the flag '%s'\n", name.c_str());
      std::exit(1);
    }
    values[static_cast<size_t>(it - names.begin())].push_back(std::move(value));
  }
  args = std::move(kept);
  return values;
}

// "--" + message when the message starts with a flag's name (see RunFlagsOnlyMain).
std::string NameTheFlag(absl::string_view message) {
  const size_t end = std::min(message.find_first_of(" :"), message.size());
  std::string name(message.substr(0, end));
  std::replace(name.begin(), name.end(), '-', '_');
  if (name.empty() || absl::FindCommandLineFlag(name) == nullptr) return std::string(message);
  return absl::StrCat("--", message);
}

}  // namespace

std::vector<std::string> ParseFlags(int argc, char** argv, std::string_view usage,
                                    std::string_view main_file,
                                    std::initializer_list<RepeatedFlag*> repeated,
                                    std::function<std::string()> version) {
  absl::FlagsUsageConfig config;
  const std::string file(main_file);
  // --help lists the main file's flags, its companion flag file's and the shared server
  // flags (server/*_flags.cc) where the binary links them.
  std::string companion;
  if (absl::EndsWith(file, "_main.cc")) {
    companion = absl::StrCat(file.substr(0, file.size() - 8), "_flags.cc");
  }
  config.contains_help_flags = [file, companion](absl::string_view path) {
    if (absl::EndsWith(path, file)) return true;
    if (!companion.empty() && absl::EndsWith(path, companion)) return true;
    const size_t slash = path.find_last_of('/');
    return slash != absl::string_view::npos && absl::EndsWith(path, "_flags.cc") &&
           absl::EndsWith(path.substr(0, slash), "server");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  if (version == nullptr) {
    // Abseil's default names the build type of the Abseil library itself ("Debug build
    // (NDEBUG not #defined)" with Debian's), not of this program.
    std::string program = argc > 0 ? argv[0] : "kvserve";
    program = program.substr(program.find_last_of('/') + 1);
    version = [program] {
      return absl::StrCat(program, " ", kVersion, "\ncommit: ", kGitCommit, "\n");
    };
  }
  config.version_string = std::move(version);
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(std::string(usage));

  std::vector<std::string> normalized;
  for (int i = 0; i < argc; ++i) normalized.push_back(Normalize(argv[i]));
  std::vector<std::string> names;
  for (RepeatedFlag* flag : repeated) {
    names.emplace_back(absl::GetFlagReflectionHandle(*flag).Name());
  }
  const std::vector<std::vector<std::string>> values = TakeRepeated(normalized, names);

  std::vector<char*> normalized_argv;
  for (std::string& arg : normalized) normalized_argv.push_back(arg.data());
  std::vector<char*> args =
      absl::ParseCommandLine(static_cast<int>(normalized_argv.size()), normalized_argv.data());
  size_t index = 0;
  for (RepeatedFlag* flag : repeated) {
    if (!values[index].empty()) absl::SetFlag(flag, values[index]);
    ++index;
  }
  return std::vector<std::string>(args.begin(), args.end());
}

int RunFlagsOnlyMain(int argc, char** argv, std::string_view program, std::string_view usage,
                     std::string_view main_file, std::function<std::string()> version,
                     const std::function<absl::Status()>& run) {
  const std::string name(program);
  const std::vector<std::string> args =
      ParseFlags(argc, argv, usage, main_file, {}, std::move(version));
  if (args.size() > 1) {
    std::fprintf(stderr, "%s: unexpected argument \"%s\" (see --help)\n", name.c_str(),
                 args[1].c_str());
    return 2;
  }
  const absl::Status status = run();
  if (status.ok()) return 0;
  std::fprintf(stderr, "%s: %s\n", name.c_str(), NameTheFlag(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace kvserve::common
