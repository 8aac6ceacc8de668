// HashRing: stable owners, every replica in each preference list, an even enough spread,
// and the consistent-hashing property (removing a replica moves only its own keys).
#include "client/hash_ring.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::client {
namespace {

const std::vector<std::string> kThree = {"10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051"};

std::string Key(int i) { return absl::StrCat("s-", i * 7919, "abcdef"); }

TEST(HashRingTest, HashIsStableAcrossProcesses) {
  // A fixed value (XXH3-64 of "kvserve", seed 0, from libxxhash): routers
  // and clients in other processes must agree.
  EXPECT_EQ(HashRing::Hash(""), HashRing::Hash(""));
  EXPECT_NE(HashRing::Hash("a"), HashRing::Hash("b"));
  EXPECT_EQ(HashRing::Hash("kvserve"), 0xaa7d45acbdfa5cb9ull)
      << std::hex << HashRing::Hash("kvserve");
}

TEST(HashRingTest, PreferenceListsEveryReplicaOnceOwnerFirst) {
  HashRing ring(kThree);
  for (int i = 0; i < 200; ++i) {
    std::vector<int> order = ring.Preference(Key(i));
    ASSERT_EQ(order.size(), 3u);
    EXPECT_EQ(std::set<int>(order.begin(), order.end()).size(), 3u);
    EXPECT_EQ(order, ring.Preference(Key(i)));  // deterministic
  }
  EXPECT_TRUE(HashRing({}).Preference("x").empty());
}

TEST(HashRingTest, OrderOfReplicasDoesNotChangeOwners) {
  HashRing a(kThree);
  HashRing b({kThree[2], kThree[0], kThree[1]});
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(a.replicas()[a.Preference(Key(i))[0]], b.replicas()[b.Preference(Key(i))[0]]);
  }
}

TEST(HashRingTest, SpreadsKeysEvenly) {
  HashRing ring(kThree);
  std::map<int, int> owned;
  constexpr int kKeys = 30000;
  for (int i = 0; i < kKeys; ++i) ++owned[ring.Preference(Key(i))[0]];
  for (int r = 0; r < 3; ++r) {
    EXPECT_GT(owned[r], kKeys / 3 * 0.8) << r;
    EXPECT_LT(owned[r], kKeys / 3 * 1.2) << r;
  }
}

// Without replica 1, a key owned by another replica keeps its owner, and a key of
// replica 1 goes to its second preference.
TEST(HashRingTest, RemovingAReplicaMovesOnlyItsKeys) {
  HashRing full(kThree);
  HashRing without({kThree[0], kThree[2]});
  int moved = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::vector<int> order = full.Preference(Key(i));
    const std::string before = full.replicas()[order[0]];
    const std::string after = without.replicas()[without.Preference(Key(i))[0]];
    if (before == kThree[1]) {
      ++moved;
      EXPECT_EQ(after, full.replicas()[order[1]]) << Key(i);
    } else {
      EXPECT_EQ(after, before) << Key(i);
    }
  }
  EXPECT_GT(moved, 500);
}

}  // namespace
}  // namespace kvserve::client
