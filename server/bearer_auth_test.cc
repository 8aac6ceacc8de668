#include "server/bearer_auth.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::server {
namespace {

TEST(BearerAuthTest, ParsesAndAuthenticates) {
  absl::StatusOr<BearerAuth> auth = BearerAuth::Parse("# comment\n\nsecret1 alice\n  s2\tbob  \n");
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(auth->Authenticate("Bearer secret1"), "alice");
  EXPECT_EQ(auth->Authenticate("Bearer s2"), "bob");
  EXPECT_EQ(auth->Authenticate("Bearer secret"), std::nullopt);
  EXPECT_EQ(auth->Authenticate("Bearer secret12"), std::nullopt);
  EXPECT_EQ(auth->Authenticate("secret1"), std::nullopt);
  EXPECT_EQ(auth->Authenticate(""), std::nullopt);
  EXPECT_EQ(auth->first_token(), "secret1");
}

TEST(BearerAuthTest, MalformedLinesNameTheLine) {
  absl::StatusOr<BearerAuth> auth = BearerAuth::Parse("a b\n# x\nonlytoken\n");
  EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(auth.status().message()), ::testing::HasSubstr("line 3"));
  EXPECT_FALSE(BearerAuth::Parse("a b c\n").ok());
  EXPECT_FALSE(BearerAuth::Parse("# nothing\n").ok());
}

}  // namespace
}  // namespace kvserve::server
