#include "backends/cpu_blas/moe_groups.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::backends::cpu_blas {
namespace {

using ::testing::ElementsAre;
using Group = MoeGroups::Group;

TEST(MoeGroupsTest, GroupsEntriesByExpertInSourceOrder) {
  // Three rows, two experts each, over experts 0..4 (expert 1 and 4 unused).
  const std::vector<int32_t> ids = {3, 0, 0, 2, 3, 2};
  MoeGroups g;
  g.Build(ids, 5);
  EXPECT_THAT(g.groups, ElementsAre(Group{0, 0, 2}, Group{2, 2, 4}, Group{3, 4, 6}));
  EXPECT_THAT(g.entry_source, ElementsAre(1, 2, 3, 5, 0, 4));
  for (size_t j = 0; j < ids.size(); ++j) EXPECT_EQ(g.entry_source[g.entry_of[j]], j);
  // Reused for a smaller step.
  g.Build(std::vector<int32_t>{4}, 5);
  EXPECT_THAT(g.groups, ElementsAre(Group{4, 0, 1}));
  EXPECT_THAT(g.entry_of, ElementsAre(0));
}

}  // namespace
}  // namespace kvserve::backends::cpu_blas
