#include "cachesvc/session_encoding.h"

#include <cstring>
#include <string>

#include "cache/block_record.h"
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

void AppendU32(uint32_t v, std::string* out) { out->append(reinterpret_cast<const char*>(&v), 4); }

// A value as servers before version 3 wrote it: "KVS1" (no tenant) or "KVS2".
std::string OldValue(const StoredSession& s) {
  std::string out = s.tenant.empty() ? "KVS1" : "KVS2";
  out += cache::HashToBytes(s.partition);
  out.push_back(s.has_head ? 1 : 0);
  out += cache::HashToBytes(s.has_head ? s.head : BlockHash{});
  AppendU32(static_cast<uint32_t>(s.owner.size()), &out);
  out += s.owner;
  if (!s.tenant.empty()) {
    AppendU32(static_cast<uint32_t>(s.tenant.size()), &out);
    out += s.tenant;
  }
  for (const std::vector<int32_t>* list : {&s.tokens, &s.turn_ends}) {
    AppendU32(static_cast<uint32_t>(list->size()), &out);
    for (int32_t v : *list) out.append(reinterpret_cast<const char*>(&v), 4);
  }
  return out;
}

TEST(SessionEncodingTest, EveryRecordIsWrittenAsVersionThreeAndRoundTrips) {
  StoredSession s = MakeSession("alice");
  s.version = 7;
  s.lease_holder = "replica-2/req-9";
  s.lease_expires_at = absl::FromUnixNanos(1'700'000'000'123'456'789);
  const std::string value = EncodeSessionValue(s);
  EXPECT_EQ(value.substr(0, 4), "KVS3");
  EXPECT_EQ(value.size(), kSessionMetaFixedBytes + 9 + 4 + 5 + 4 + 15 + 4 + 16 + 4 + 4);
  StoredSession back;
  back.id = "s-1";
  ASSERT_TRUE(DecodeSessionValue(value, &back));
  EXPECT_EQ(back.version, 7);
  EXPECT_FALSE(back.closed);
  EXPECT_EQ(back.lease_holder, "replica-2/req-9");
  EXPECT_EQ(back.lease_expires_at, s.lease_expires_at);  // nanosecond-exact
  EXPECT_EQ(back.tenant, "alice");
  EXPECT_EQ(back.owner, "replica-1");
  EXPECT_EQ(back.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(back.turn_ends, (std::vector<int32_t>{4}));
  EXPECT_EQ(EncodeSessionValue(back), value);
  // Without a tenant or a lease: still version 3.
  const std::string plain = EncodeSessionValue(MakeSession(""));
  EXPECT_EQ(plain.substr(0, 4), "KVS3");
  ASSERT_TRUE(DecodeSessionValue(plain, &back));
  EXPECT_EQ(back.version, 1);
  EXPECT_TRUE(back.lease_holder.empty());
  EXPECT_EQ(back.lease_expires_at, absl::InfinitePast());
  // The meta (what List reads) stops after the owner and has the version and `closed`.
  StoredSession meta;
  ASSERT_TRUE(DecodeSessionMeta(value.substr(0, kSessionMetaFixedBytes + 9), &meta));
  EXPECT_EQ(meta.owner, "replica-1");
  EXPECT_EQ(meta.version, 7);
  EXPECT_EQ(meta.tenant, "");
  EXPECT_EQ(meta.lease_holder, "");
}

TEST(SessionEncodingTest, ATombstoneRoundTrips) {
  StoredSession t;
  t.partition = BlockHash{1, 2};
  t.closed = true;
  t.version = 4;
  const std::string value = EncodeSessionValue(t);
  StoredSession back;
  ASSERT_TRUE(DecodeSessionValue(value, &back));
  EXPECT_TRUE(back.closed);
  EXPECT_EQ(back.version, 4);
  StoredSession meta;
  ASSERT_TRUE(DecodeSessionMeta(value, &meta));
  EXPECT_TRUE(meta.closed);
}

TEST(SessionEncodingTest, OldVersionsReadAsVersionOneWithoutALease) {
  for (const std::string& tenant : {std::string(), std::string("alice")}) {
    const std::string old = OldValue(MakeSession(tenant));
    StoredSession back;
    ASSERT_TRUE(DecodeSessionValue(old, &back)) << tenant;
    EXPECT_EQ(back.version, 1);
    EXPECT_FALSE(back.closed);
    EXPECT_TRUE(back.lease_holder.empty());
    EXPECT_EQ(back.tenant, tenant);
    EXPECT_EQ(back.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
    StoredSession meta;
    ASSERT_TRUE(DecodeSessionMeta(old.substr(0, 41 + 9), &meta));
    EXPECT_EQ(meta.owner, "replica-1");
    EXPECT_EQ(meta.version, 1);
    // Written again, as version 3.
    EXPECT_EQ(EncodeSessionValue(back).substr(0, 4), "KVS3");
  }
  // Version 2 with an empty tenant is version 1's session: not its encoding.
  std::string empty_tenant = OldValue(MakeSession("alice"));
  empty_tenant.replace(41 + 9, 4 + 5, std::string(4, '\0'));
  StoredSession s;
  EXPECT_FALSE(DecodeSessionValue(empty_tenant, &s));
}

TEST(SessionEncodingTest, DecodingIsStrict) {
  StoredSession leased = MakeSession("alice");
  leased.lease_holder = "h";
  leased.lease_expires_at = absl::FromUnixSeconds(1'000);
  const std::string v3 = EncodeSessionValue(leased);
  StoredSession s;
  // Cut anywhere, or a byte too many: rejected.
  for (size_t n = 0; n < v3.size(); ++n) EXPECT_FALSE(DecodeSessionValue(v3.substr(0, n), &s)) << n;
  EXPECT_FALSE(DecodeSessionValue(v3 + '\0', &s));
  // A version below 1.
  std::string bad = v3;
  std::memset(bad.data() + 37, 0, 8);
  EXPECT_FALSE(DecodeSessionValue(bad, &s));
  EXPECT_FALSE(DecodeSessionMeta(bad, &s));
  // A closed flag other than 0 or 1; a tombstone with a head (and tokens).
  bad = v3;
  bad[45] = 2;
  EXPECT_FALSE(DecodeSessionValue(bad, &s));
  bad[45] = 1;
  EXPECT_FALSE(DecodeSessionValue(bad, &s));
  // A lease deadline without a holder, or a holder without a deadline.
  bad = EncodeSessionValue(MakeSession("alice"));
  bad[46] = 1;
  EXPECT_FALSE(DecodeSessionValue(bad, &s));
  bad = v3;
  std::memset(bad.data() + 46, 0, 8);
  EXPECT_FALSE(DecodeSessionValue(bad, &s));
  // A tenant length beyond the value.
  bad = v3;
  bad[kSessionMetaFixedBytes + 9 + 3] = '\x7f';
  EXPECT_FALSE(DecodeSessionValue(bad, &s));
  // An unknown version.
  bad = v3;
  bad[3] = '4';
  EXPECT_FALSE(DecodeSessionValue(bad, &s));
  EXPECT_FALSE(DecodeSessionMeta(bad, &s));
  // A version 3 value relabelled as version 1 or 2 does not decode.
  bad = v3;
  bad[3] = '1';
  EXPECT_FALSE(DecodeSessionValue(bad, &s));
  bad[3] = '2';
  EXPECT_FALSE(DecodeSessionValue(bad, &s));
}

}  // namespace
}  // namespace kvserve::cachesvc
