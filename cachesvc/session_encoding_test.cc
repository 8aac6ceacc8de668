#include "cachesvc/session_encoding.h"

#include <string>

#include "gtest/gtest.h"

namespace kvserve::cachesvc {
namespace {

StoredSession MakeSession(const std::string& tenant) {
  StoredSession s;
  s.id = "s-1";
  s.partition = BlockHash{1, 2};
  s.tokens = {1, 2, 3, 4};
  s.turn_ends = {4};
  s.has_head = true;
  s.head = BlockHash{3, 4};
  s.owner = "replica-1";
  s.tenant = tenant;
  return s;
}

TEST(SessionEncodingTest, WithoutATenantTheEncodingIsVersionOne) {
  const std::string value = EncodeSessionValue(MakeSession(""));
  EXPECT_EQ(value.substr(0, 4), "KVS1");
  // Version 1 as before tenants: fixed fields, owner, then the token list at once.
  EXPECT_EQ(value.size(), kSessionMetaFixedBytes + 9 + 4 + 16 + 4 + 4);
  StoredSession back;
  ASSERT_TRUE(DecodeSessionValue(value, &back));
  EXPECT_EQ(back.tenant, "");
  EXPECT_EQ(back.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(back.owner, "replica-1");
}

TEST(SessionEncodingTest, ATenantRoundTripsInVersionTwo) {
  const std::string value = EncodeSessionValue(MakeSession("alice"));
  EXPECT_EQ(value.substr(0, 4), "KVS2");
  StoredSession back;
  back.id = "s-1";
  ASSERT_TRUE(DecodeSessionValue(value, &back));
  EXPECT_EQ(back.tenant, "alice");
  EXPECT_EQ(back.owner, "replica-1");
  EXPECT_EQ(back.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(back.turn_ends, (std::vector<int32_t>{4}));
  EXPECT_EQ(EncodeSessionValue(back), value);
  // The meta (what List reads) stops before the tenant.
  StoredSession meta;
  ASSERT_TRUE(DecodeSessionMeta(value.substr(0, kSessionMetaFixedBytes + 9), &meta));
  EXPECT_EQ(meta.owner, "replica-1");
  EXPECT_EQ(meta.tenant, "");
}

TEST(SessionEncodingTest, DecodingIsStrict) {
  const std::string v2 = EncodeSessionValue(MakeSession("alice"));
  StoredSession s;
  // Cut anywhere, or a byte too many: rejected.
  for (size_t n = 0; n < v2.size(); ++n) EXPECT_FALSE(DecodeSessionValue(v2.substr(0, n), &s)) << n;
  EXPECT_FALSE(DecodeSessionValue(v2 + '\0', &s));
  // Version 2 with an empty tenant is version 1's session: not its encoding.
  std::string empty_tenant = v2;
  const size_t tenant_at = kSessionMetaFixedBytes + 9;
  empty_tenant.replace(tenant_at, 4 + 5, std::string(4, '\0'));
  EXPECT_FALSE(DecodeSessionValue(empty_tenant, &s));
  // A tenant length beyond the value.
  std::string long_tenant = v2;
  long_tenant[tenant_at + 3] = '\x7f';
  EXPECT_FALSE(DecodeSessionValue(long_tenant, &s));
  // An unknown version.
  std::string v3 = v2;
  v3[3] = '3';
  EXPECT_FALSE(DecodeSessionValue(v3, &s));
  EXPECT_FALSE(DecodeSessionMeta(v3, &s));
  // A version 1 value with a tenant's bytes spliced in is not a version 1 value.
  std::string v1_spliced = v2;
  v1_spliced[3] = '1';
  EXPECT_FALSE(DecodeSessionValue(v1_spliced, &s));
}

}  // namespace
}  // namespace kvserve::cachesvc
