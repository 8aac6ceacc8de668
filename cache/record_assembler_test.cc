#include "cache/record_assembler.h"

#include "gtest/gtest.h"

namespace kvserve::cache {
namespace {

absl::Status Add(RecordAssembler& a, int32_t index, int64_t offset, int64_t record_bytes,
                 std::string data, std::optional<std::string>* out) {
  return a.Add(index, offset, record_bytes, &data, out);
}

TEST(RecordAssemblerTest, ReassemblesInOrder) {
  RecordAssembler a(100);
  std::optional<std::string> out;
  ASSERT_TRUE(Add(a, 0, 0, 3, "abc", &out).ok());
  EXPECT_EQ(out, "abc");
  ASSERT_TRUE(Add(a, 1, 0, 5, "he", &out).ok());
  EXPECT_FALSE(out.has_value());
  EXPECT_TRUE(a.mid_record());
  ASSERT_TRUE(Add(a, 1, 2, 5, "llo", &out).ok());
  EXPECT_EQ(out, "hello");
  EXPECT_FALSE(a.mid_record());
  EXPECT_EQ(a.next_index(), 2);
}

// AddView: the same records as views, a whole one of the chunk itself (nothing moved
// from it), a split one of the assembler's buffer; the same checks.
TEST(RecordAssemblerTest, ViewsWholeAndReassembledRecords) {
  RecordAssembler a(100);
  std::optional<std::string_view> out;
  const std::string whole = "abc";
  ASSERT_TRUE(a.AddView(0, 0, 3, whole, &out).ok());
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->data(), whole.data());  // a view of the chunk, not a copy
  EXPECT_EQ(whole, "abc");
  ASSERT_TRUE(a.AddView(1, 0, 5, "he", &out).ok());
  EXPECT_FALSE(out.has_value());
  ASSERT_TRUE(a.AddView(1, 2, 5, "llo", &out).ok());
  EXPECT_EQ(out, "hello");
  ASSERT_TRUE(a.AddView(2, 0, 2, "x", &out).ok());
  ASSERT_TRUE(a.AddView(2, 1, 2, "y", &out).ok());
  EXPECT_EQ(out, "xy");
  EXPECT_EQ(a.next_index(), 3);
  absl::Status s = a.AddView(3, 1, 4, "ab", &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("chunks.offset"), absl::string_view::npos);
  EXPECT_EQ(RecordAssembler(2).AddView(0, 0, 3, "abc", &out).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(RecordAssemblerTest, RejectsProtocolViolationsPrecisely) {
  std::optional<std::string> out;
  {
    RecordAssembler a(100);
    ASSERT_TRUE(Add(a, 0, 0, 5, "he", &out).ok());
    absl::Status s = Add(a, 0, 3, 5, "lo", &out);  // gap
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("chunks.offset"), absl::string_view::npos);
  }
  {
    RecordAssembler a(100);
    ASSERT_TRUE(Add(a, 0, 0, 5, "he", &out).ok());
    EXPECT_EQ(Add(a, 0, 2, 6, "llo", &out).code(), absl::StatusCode::kInvalidArgument);
  }
  {
    RecordAssembler a(100);
    EXPECT_EQ(Add(a, 1, 0, 3, "abc", &out).code(), absl::StatusCode::kInvalidArgument);
  }
  {
    RecordAssembler a(100);
    absl::Status s = Add(a, 0, 0, 101, "a", &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(s.message().find("max-record-bytes"), absl::string_view::npos);
  }
  {
    RecordAssembler a(100);
    EXPECT_EQ(Add(a, 0, 0, 0, "", &out).code(), absl::StatusCode::kInvalidArgument);
    RecordAssembler b(100);
    EXPECT_EQ(Add(b, 0, 0, 2, "abc", &out).code(), absl::StatusCode::kInvalidArgument);
    RecordAssembler c(100);
    EXPECT_EQ(Add(c, 0, 0, 2, "", &out).code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kvserve::cache
