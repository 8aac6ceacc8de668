#include "bench/tool_flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::bench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(IntListFlagTest, ParsesAndUnparsesCommaLists) {
  IntListFlag flag;
  std::string error;
  ASSERT_TRUE(AbslParseFlag("1,4,16,64", &flag, &error)) << error;
  EXPECT_THAT(flag.values, ElementsAre(1, 4, 16, 64));
  EXPECT_EQ(AbslUnparseFlag(flag), "1,4,16,64");
  ASSERT_TRUE(AbslParseFlag("-3", &flag, &error)) << error;
  EXPECT_THAT(flag.values, ElementsAre(-3));
  EXPECT_EQ(AbslUnparseFlag(IntListFlag({2, 8})), "2,8");
}

TEST(IntListFlagTest, RejectsMalformedListsAndKeepsTheOldValue) {
  IntListFlag flag({7});
  for (const char* bad : {"", "1,", ",1", "1,,2", "1, 2", "x", "1.5", "+1", "99999999999"}) {
    std::string error;
    EXPECT_FALSE(AbslParseFlag(bad, &flag, &error)) << bad;
    EXPECT_THAT(error, HasSubstr("comma-separated list of integers")) << bad;
    EXPECT_THAT(flag.values, ElementsAre(7)) << bad;
  }
}

TEST(IntListFlagTest, ReadIntListNamesTheFlagAndTheValue) {
  std::vector<int> out = {9};
  ASSERT_TRUE(ReadIntList("batches", IntListFlag({1, 4096}), 1, 4096, &out).ok());
  EXPECT_THAT(out, ElementsAre(1, 4096));
  const absl::Status s = ReadIntList("batches", IntListFlag({2, 0}), 1, 4096, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--batches: 0 is outside [1, 4096]"));
  EXPECT_THAT(out, ElementsAre(1, 4096));  // unchanged
}

TEST(ReadCountsTest, CopiesAllOrNothing) {
  int a = -1;
  int b = -1;
  EXPECT_TRUE(ReadCounts({{"a", 0, 0, 10, &a}, {"b", 10, 1, 10, &b}}).ok());
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 10);
  const absl::Status s = ReadCounts({{"a", 5, 0, 10, &a}, {"b-name", 0, 1, 10, &b}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--b-name must be in [1, 10], got 0"));
  EXPECT_EQ(a, 0);  // unchanged
  EXPECT_EQ(b, 10);
}

}  // namespace
}  // namespace kvserve::bench
