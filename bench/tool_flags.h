// Flag values of the bench tools: a list-of-integers flag type and range checks.
#ifndef KVSERVE_BENCH_TOOL_FLAGS_H_
#define KVSERVE_BENCH_TOOL_FLAGS_H_

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvserve::bench {

// A comma-separated list of integers as an Abseil flag type, e.g.
//   ABSL_FLAG(kvserve::bench::IntListFlag, batches, kvserve::bench::IntListFlag({1, 4}), "...");
// so that --help shows the default as "1,4" and a malformed list is a flag error.
struct IntListFlag {
  IntListFlag() = default;
  explicit IntListFlag(std::vector<int> v) : values(std::move(v)) {}
  std::vector<int> values;
};

// Parses "1,4,16": one or more decimal integers separated by single commas (no spaces,
// no empty items, each within int). False with a message in `error` otherwise.
bool AbslParseFlag(absl::string_view text, IntListFlag* flag, std::string* error);
// "1,4,16".
std::string AbslUnparseFlag(const IntListFlag& flag);

// Copies the values of `flag` into `out` when all lie in [min, max]; otherwise
// INVALID_ARGUMENT naming `--name` and the first value outside (`out` unchanged).
absl::Status ReadIntList(absl::string_view name, const IntListFlag& flag, int min, int max,
                         std::vector<int>* out);

// One integer flag to check and copy: its name (for the message), value and range.
struct CountFlag {
  absl::string_view name;
  int value = 0;
  int min = 0;
  int max = 0;
  int* out = nullptr;
};

// Copies every value into its `out` when all lie in their [min, max]; otherwise
// INVALID_ARGUMENT naming `--name`, the range and the value of the first one outside
// (then nothing is copied).
absl::Status ReadCounts(std::initializer_list<CountFlag> counts);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_TOOL_FLAGS_H_
