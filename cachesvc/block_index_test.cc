#include "cachesvc/block_index.h"

#include <gtest/gtest.h>
TEST(BlockIndexPlaceholder, Builds) {}
