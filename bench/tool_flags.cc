#include "bench/tool_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kvserve::bench {

bool AbslParseFlag(absl::string_view text, IntListFlag* flag, std::string* error) {
  std::vector<int> values;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int value = 0;
    // SimpleAtoi tolerates surrounding spaces and a '+'; a list is digits only.
    if (item.empty() || item.find_first_of(" \t+") != absl::string_view::npos ||
        !absl::SimpleAtoi(item, &value)) {
      *error = absl::StrCat("not a comma-separated list of integers: \"", text, "\"");
      return false;
    }
    values.push_back(value);
  }
  flag->values = std::move(values);
  return true;
}

std::string AbslUnparseFlag(const IntListFlag& flag) { return absl::StrJoin(flag.values, ","); }

absl::Status ReadIntList(absl::string_view name, const IntListFlag& flag, int min, int max,
                         std::vector<int>* out) {
  for (int value : flag.values) {
    if (value < min || value > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": ", value, " is outside [", min, ", ", max, "]"));
    }
  }
  *out = flag.values;
  return absl::OkStatus();
}

absl::Status ReadCounts(std::initializer_list<CountFlag> counts) {
  for (const CountFlag& c : counts) {
    if (c.value < c.min || c.value > c.max) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", c.name, " must be in [", c.min, ", ", c.max, "], got ", c.value));
    }
  }
  for (const CountFlag& c : counts) *c.out = c.value;
  return absl::OkStatus();
}

}  // namespace kvserve::bench
