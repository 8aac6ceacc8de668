#include "common/flags.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/build_version.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::vector<std::string>, stop, {}, "Repeated: one value per occurrence.");
ABSL_FLAG(std::string, prompt, "", "A string flag.");
ABSL_FLAG(int32_t, max_tokens, 8, "An integer flag.");
ABSL_FLAG(bool, ignore_eos, false, "A boolean flag.");

namespace kvserve::common {
namespace {

// ParseFlags may run once per process (Abseil's usage message is set once), so every
// case parses in a death-test child and prints what it got to stderr.
void ParseAndPrint(std::vector<std::string> args, std::function<std::string()> version = nullptr) {
  args.insert(args.begin(), "flags_test");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  const std::vector<std::string> positional =
      ParseFlags(static_cast<int>(argv.size()), argv.data(), "flags_test", "flags_test.cc",
                 {&FLAGS_stop}, std::move(version));
  std::fprintf(stderr, "stop=[%s] prompt=[%s] max_tokens=%d ignore_eos=%d positional=[%s]\n",
               absl::StrJoin(absl::GetFlag(FLAGS_stop), "|").c_str(),
               absl::GetFlag(FLAGS_prompt).c_str(), absl::GetFlag(FLAGS_max_tokens),
               absl::GetFlag(FLAGS_ignore_eos) ? 1 : 0,
               absl::StrJoin(positional.begin() + 1, positional.end(), "|").c_str());
  std::exit(0);
}

TEST(ParseFlagsTest, DashedAndUnderscoredNamesBothWork) {
  EXPECT_EXIT(ParseAndPrint({"--max-tokens", "3", "--ignore-eos", "--prompt=a-b"}),
              testing::ExitedWithCode(0),
              "stop=\\[\\] prompt=\\[a-b\\] max_tokens=3 ignore_eos=1 positional=\\[\\]");
  EXPECT_EXIT(ParseAndPrint({"--max_tokens=4", "pos"}), testing::ExitedWithCode(0),
              "max_tokens=4 ignore_eos=0 positional=\\[pos\\]");
}

TEST(ParseFlagsTest, RepeatedFlagCollectsEveryOccurrenceWhole) {
  EXPECT_EXIT(ParseAndPrint({"--stop", "a,b", "--max-tokens", "2", "--stop=.", "--stop", ","}),
              testing::ExitedWithCode(0), "stop=\\[a,b\\|\\.\\|,\\] prompt=\\[\\] max_tokens=2");
}

TEST(ParseFlagsTest, ValuesOfOtherFlagsAndArgumentsAfterDoubleDashAreNotTaken) {
  EXPECT_EXIT(ParseAndPrint({"--prompt", "--stop", "--stop", "x", "--", "--stop", "y"}),
              testing::ExitedWithCode(0),
              "stop=\\[x\\] prompt=\\[--stop\\] max_tokens=8 ignore_eos=0 "
              "positional=\\[--stop\\|y\\]");
}

TEST(ParseFlagsTest, ShortHelpIsHelp) {
  // Help goes to stdout; an unknown "-h" would be an error on stderr.
  EXPECT_EXIT(ParseAndPrint({"-h"}), testing::ExitedWithCode(1), "^$");
}

TEST(ParseFlagsTest, VersionRunsAfterTheFlagsAreParsedAndExitsZero) {
  // The callback sees --max-tokens even though it comes after --version.
  const auto version = [] {
    std::fprintf(stderr, "version sees max_tokens=%d\n", absl::GetFlag(FLAGS_max_tokens));
    return std::string("v1\n");
  };
  EXPECT_EXIT(ParseAndPrint({"--version", "--max-tokens=5"}, version), testing::ExitedWithCode(0),
              "^version sees max_tokens=5\n$");
}

TEST(ParseFlagsTest, DefaultVersionNamesTheProgramVersionAndCommit) {
  // Not Abseil's default, which describes how Abseil itself was built. The text goes to
  // stdout; the child sends it to stderr, which the death test matches.
  const std::string expected =
      absl::StrCat("^flags_test ", kVersion, "\ncommit: ", kGitCommit, "\n$");
  EXPECT_EXIT(
      {
        dup2(STDERR_FILENO, STDOUT_FILENO);
        ParseAndPrint({"--version"});
      },
      testing::ExitedWithCode(0), expected);
}

TEST(ParseFlagsTest, BadFlagsExitNonZeroWithAMessage) {
  EXPECT_EXIT(ParseAndPrint({"--stop"}), testing::ExitedWithCode(1),
              "Missing the value for the flag 'stop'");
  EXPECT_EXIT(ParseAndPrint({"--no-such-flag=1"}), testing::ExitedWithCode(1), "no_such_flag");
  EXPECT_EXIT(ParseAndPrint({"--max-tokens", "many"}), testing::ExitedWithCode(1), "max_tokens");
}

// RunFlagsOnlyMain in a death-test child (it parses flags once per process): exits with
// what it returned.
void RunMain(std::vector<std::string> args, absl::Status status) {
  args.insert(args.begin(), "flags_test");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::exit(RunFlagsOnlyMain(static_cast<int>(argv.size()), argv.data(), "prog", "flags_test",
                             "flags_test.cc", nullptr, [&status] { return status; }));
}

TEST(RunFlagsOnlyMainTest, StatusBecomesTheExitCodeAndTheMessageNamesTheFlag) {
  EXPECT_EXIT(RunMain({}, absl::OkStatus()), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(RunMain({}, absl::InvalidArgumentError("max-tokens must be >= 1, got 0")),
              testing::ExitedWithCode(2), "prog: --max-tokens must be >= 1, got 0");
  EXPECT_EXIT(RunMain({}, absl::InvalidArgumentError("prompt: cannot read x")),
              testing::ExitedWithCode(2), "prog: --prompt: cannot read x");
  // Not a flag's name: the message as it is.
  EXPECT_EXIT(RunMain({}, absl::UnavailableError("model file x: not found")),
              testing::ExitedWithCode(1), "prog: model file x: not found");
}

TEST(RunFlagsOnlyMainTest, APositionalArgumentIsAnError) {
  EXPECT_EXIT(RunMain({"extra"}, absl::OkStatus()), testing::ExitedWithCode(2),
              "prog: unexpected argument \"extra\" \\(see --help\\)");
}

}  // namespace
}  // namespace kvserve::common
