#include "engine/field_error.h"

#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

TEST(FieldErrorTest, CarriesTheFieldPathBesideTheMessage) {
  const absl::Status s = FieldError("top_p", "must be in (0, 1], got 2");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "top_p must be in (0, 1], got 2");
  EXPECT_EQ(ErrorField(s), "top_p");
  EXPECT_EQ(ErrorReason(s), "must be in (0, 1], got 2");
}

TEST(FieldErrorTest, NestingPrefixesThePathAndKeepsTheReason) {
  const absl::Status s = NestField("sampling", FieldError("stop_strings[2]", "must not be empty"));
  EXPECT_EQ(ErrorField(s), "sampling.stop_strings[2]");
  EXPECT_EQ(s.message(), "sampling.stop_strings[2] must not be empty");
  EXPECT_EQ(ErrorReason(s), "must not be empty");
}

TEST(FieldErrorTest, OtherStatusesHaveNoField) {
  EXPECT_EQ(ErrorField(absl::InvalidArgumentError("top_p must be in (0, 1]")), std::nullopt);
  EXPECT_EQ(ErrorField(absl::OkStatus()), std::nullopt);
  EXPECT_EQ(ErrorField(absl::NotFoundError("x")), std::nullopt);
  const absl::Status plain = absl::UnavailableError("down");
  EXPECT_EQ(NestField("sampling", plain), plain);
  EXPECT_EQ(ErrorReason(plain), "down");
}

}  // namespace
}  // namespace kvserve::engine
