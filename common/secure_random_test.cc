#include "common/secure_random.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace kvserve::common {
namespace {

TEST(SecureRandomTest, HexHasTheAskedLengthAndNeverRepeats) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<std::string> hex = SecureRandomHex(16);
    ASSERT_TRUE(hex.ok()) << hex.status();
    ASSERT_EQ(hex->size(), 32u);
    EXPECT_EQ(hex->find_first_not_of("0123456789abcdef"), std::string::npos) << *hex;
    EXPECT_TRUE(seen.insert(*hex).second) << "repeated " << *hex;
  }
}

TEST(SecureRandomTest, BytesAreSpreadOverAllValues) {
  // 64 KiB of output: every byte value appears (the chance that a uniform source misses
  // one is 256 * (255/256)^65536, about 1e-109).
  std::string buffer(64 << 10, '\0');
  ASSERT_TRUE(SecureRandomBytes(reinterpret_cast<uint8_t*>(buffer.data()), buffer.size()).ok());
  std::set<unsigned char> values(buffer.begin(), buffer.end());
  EXPECT_EQ(values.size(), 256u);
}

}  // namespace
}  // namespace kvserve::common
