#include "bench/tool_main.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/common_flags.h"

namespace kvserve::bench {
namespace {

bool IsHelp(absl::string_view arg) {
  return arg == "--help" || arg == "-h" || arg == "-help" || arg == "--helpshort";
}

// The flag an argument names ("--dashed-name=v" -> dashed_name, "--nobool" -> bool), or
// null: not a flag, or one Abseil does not know (it then reports it).
const absl::CommandLineFlag* NamedFlag(absl::string_view arg) {
  if (arg.size() < 2 || arg[0] != '-') return nullptr;
  arg.remove_prefix(arg[1] == '-' ? 2 : 1);
  std::string name(arg.substr(0, arg.find('=')));
  std::replace(name.begin(), name.end(), '-', '_');
  if (const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name)) return flag;
  if (name.rfind("no", 0) == 0) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name.substr(2));
    if (flag != nullptr && flag->IsOfType<bool>()) return flag;
  }
  return nullptr;
}

// Whether `flag` is defined in `file` (a __FILE__). Abseil reports a flag's file without
// its leading slashes (absl/flags/usage_config.h, normalize_filename), so an absolute
// __FILE__ ("/src/bench/x.cc") is compared as "src/bench/x.cc".
absl::string_view WithoutLeadingSlashes(absl::string_view path) {
  const size_t start = path.find_first_not_of("/\\");
  return start == absl::string_view::npos ? absl::string_view() : path.substr(start);
}
bool DefinedIn(const absl::CommandLineFlag& flag, absl::string_view file) {
  return WithoutLeadingSlashes(flag.Filename()) == WithoutLeadingSlashes(file);
}

const SharedFlagUse* FindShared(const Subcommand& sub, absl::string_view name) {
  for (const SharedFlagUse& use : sub.shared_flags) {
    if (use.name == name) return &use;
  }
  return nullptr;
}

// Refuses a flag that another subcommand defines or a shared flag this one does not read
// (Abseil would accept it: every subcommand's flags live in this one process).
absl::Status CheckFlagsBelong(const Subcommand& sub, absl::Span<const Subcommand> subcommands,
                              const std::vector<absl::string_view>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") break;
    const absl::CommandLineFlag* flag = NamedFlag(args[i]);
    if (flag == nullptr) continue;
    if (args[i].find('=') == absl::string_view::npos && !flag->IsOfType<bool>()) ++i;  // value
    const bool ours = DefinedIn(*flag, CommonFlagsFile()) ||
                      std::any_of(subcommands.begin(), subcommands.end(),
                                  [flag](const Subcommand& s) { return DefinedIn(*flag, s.file); });
    if (!ours || DefinedIn(*flag, sub.file) || FindShared(sub, flag->Name()) != nullptr) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag->Name(), " is not a flag of this subcommand (see --help)"));
  }
  return absl::OkStatus();
}

// Every shared flag a subcommand names is one of bench/common_flags.cc.
absl::Status CheckSharedFlagsExist(const Subcommand& sub) {
  for (const SharedFlagUse& use : sub.shared_flags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(use.name);
    if (flag == nullptr || !DefinedIn(*flag, CommonFlagsFile())) {
      return absl::InternalError(
          absl::StrCat("shared flag --", use.name, " is not defined in ", CommonFlagsFile()));
    }
  }
  return absl::OkStatus();
}

// The usage, then every flag the subcommand reads (its own and the shared ones), by name.
void PrintSubcommandHelp(absl::string_view program, const Subcommand& sub) {
  struct Line {
    std::string name, help, default_value;
  };
  std::vector<Line> lines;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (DefinedIn(*flag, sub.file)) {
      lines.push_back({std::string(name), flag->Help(), flag->DefaultValue()});
    }
  }
  for (const SharedFlagUse& use : sub.shared_flags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(use.name);
    lines.push_back(
        {std::string(use.name), use.help.empty() ? flag->Help() : std::string(use.help),
         use.default_value.empty() ? flag->DefaultValue() : std::string(use.default_value)});
  }
  std::sort(lines.begin(), lines.end(),
            [](const Line& a, const Line& b) { return a.name < b.name; });
  std::printf("%s\n\nFlags of `%s %s` (names take - or _: --kv-dtype or --kv_dtype):\n",
              std::string(sub.usage).c_str(), std::string(program).c_str(),
              std::string(sub.name).c_str());
  for (const Line& line : lines) {
    std::printf("    --%s (%s); default: %s;\n", line.name.c_str(), line.help.c_str(),
                line.default_value.empty() ? "\"\"" : line.default_value.c_str());
  }
}

void PrintHelp(absl::string_view program, absl::Span<const Subcommand> subcommands) {
  const std::string name(program);
  std::printf(
      "Usage: %s SUBCOMMAND [flags]\n\n"
      "Benchmarks and offline tools of kvserve; `%s SUBCOMMAND --help` lists a "
      "subcommand's flags.\n\nSubcommands:\n",
      name.c_str(), name.c_str());
  for (const Subcommand& sub : subcommands) {
    std::printf("  %-17s %s\n", std::string(sub.name).c_str(), std::string(sub.summary).c_str());
  }
}

int ExitStatus(const absl::Status& status, const std::string& prefix) {
  if (status.ok()) return 0;
  const absl::StatusCode code = status.code();
  if (code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound) {
    std::fprintf(stderr, "%s: %s\n", prefix.c_str(), std::string(status.message()).c_str());
    return 2;
  }
  std::fprintf(stderr, "%s: %s\n", prefix.c_str(), status.ToString().c_str());
  return 1;
}

}  // namespace

int ToolMain(int argc, char** argv, absl::string_view program,
             absl::Span<const Subcommand> subcommands, std::function<std::string()> version) {
  const std::string name(program);
  const std::string names = absl::StrJoin(
      subcommands, ", ",
      [](std::string* out, const Subcommand& s) { out->append(s.name.data(), s.name.size()); });
  if (argc > 1 && IsHelp(argv[1])) {
    PrintHelp(program, subcommands);
    return 0;
  }
  if (argc < 2 || argv[1][0] == '-') {
    // Only flags: --version (or Abseil's --helpfull) end here; anything else lacks a
    // subcommand.
    common::ParseFlags(argc, argv, "", name, {}, std::move(version));
    std::fprintf(stderr, "%s: name a subcommand: %s (see --help)\n", name.c_str(), names.c_str());
    return 2;
  }
  const absl::string_view wanted = argv[1];
  const auto sub = std::find_if(subcommands.begin(), subcommands.end(),
                                [wanted](const Subcommand& s) { return s.name == wanted; });
  if (sub == subcommands.end()) {
    std::fprintf(stderr, "%s: unknown subcommand \"%s\" (subcommands: %s)\n", name.c_str(), argv[1],
                 names.c_str());
    return 2;
  }
  const std::string prefix = absl::StrCat(name, " ", sub->name);
  if (absl::Status s = CheckSharedFlagsExist(*sub); !s.ok()) return ExitStatus(s, prefix);
  std::vector<absl::string_view> args(argv + 2, argv + argc);
  if (std::any_of(args.begin(), args.end(), IsHelp)) {
    PrintSubcommandHelp(program, *sub);
    return 0;
  }
  if (absl::Status s = CheckFlagsBelong(*sub, subcommands, args); !s.ok()) {
    return ExitStatus(s, prefix);
  }
  // argv without the subcommand, for Abseil.
  std::vector<char*> flag_argv = {argv[0]};
  flag_argv.insert(flag_argv.end(), argv + 2, argv + argc);
  flag_argv.push_back(nullptr);
  const int flag_argc = argc - 1;
  const std::string_view usage(sub->usage.data(), sub->usage.size());
  const std::string_view file(sub->file.data(), sub->file.size());
  const std::vector<std::string> positional =
      sub->repeated == nullptr
          ? common::ParseFlags(flag_argc, flag_argv.data(), usage, file, {}, std::move(version))
          : common::ParseFlags(flag_argc, flag_argv.data(), usage, file, {sub->repeated},
                               std::move(version));
  if (positional.size() > 1) {
    std::fprintf(stderr, "%s: unexpected argument \"%s\" (see --help)\n", prefix.c_str(),
                 positional[1].c_str());
    return 2;
  }
  return ExitStatus(sub->run(argv), prefix);
}

}  // namespace kvserve::bench
