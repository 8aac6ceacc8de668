#include <gtest/gtest.h>
#include "cachesvc/block_index.h"
TEST(BlockIndexPlaceholder, Builds) {}
