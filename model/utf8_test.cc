#include "model/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace kvserve::model {
namespace {

TEST(Utf8Test, ScanClassifiesByTable37) {
  struct Case {
    std::string bytes;
    Utf8Kind kind;
    size_t n;
  };
  const Case cases[] = {
      {"a", Utf8Kind::kChar, 1},
      {"\xC3\xA9", Utf8Kind::kChar, 2},               // é
      {"\xE4\xB8\xAD", Utf8Kind::kChar, 3},           // 中
      {"\xF0\x9F\x98\x80", Utf8Kind::kChar, 4},       // 😀
      {"\xF4\x8F\xBF\xBF", Utf8Kind::kChar, 4},       // U+10FFFF
      {"\x80", Utf8Kind::kIllFormed, 1},              // lone continuation
      {"\xC0\xAF", Utf8Kind::kIllFormed, 1},          // overlong lead
      {"\xE0\x80\x80", Utf8Kind::kIllFormed, 1},      // overlong 3-byte form
      {"\xED\xA0\x80", Utf8Kind::kIllFormed, 1},      // surrogate U+D800
      {"\xF4\x90\x80\x80", Utf8Kind::kIllFormed, 1},  // above U+10FFFF
      {"\xF5", Utf8Kind::kIllFormed, 1},
      {"\xE4\xB8"
       "a",
       Utf8Kind::kIllFormed, 2},  // maximal subpart, then 'a'
      {"\xE4\xB8", Utf8Kind::kIncomplete, 2},
      {"\xF0\x9F\x98", Utf8Kind::kIncomplete, 3},
  };
  for (const Case& c : cases) {
    const Utf8Step step = ScanUtf8(c.bytes);
    EXPECT_EQ(step.kind, c.kind) << testing::PrintToString(c.bytes);
    EXPECT_EQ(step.n, c.n) << testing::PrintToString(c.bytes);
  }
}

TEST(Utf8Test, IsValidUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ASCII\n"));
  EXPECT_TRUE(IsValidUtf8("\xE4\xB8\xAD\xE5\x8D\x8E \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("ab\xE4\xB8"));  // ends inside a character
  EXPECT_FALSE(IsValidUtf8("\xED\xBF\xBF"));
  EXPECT_FALSE(
      IsValidUtf8(std::string("a\xFF"
                              "b")));
}

}  // namespace
}  // namespace kvserve::model
