#include "model/index_sharing.h"

#include <vector>

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(IndexSharingTest, Glm52ComputingLayersOver78) {
  IndexSharing sharing{4, 3};
  std::vector<int> computing;
  for (int n = 1; n <= 78; ++n) {
    if (sharing.IsComputingLayer(n)) computing.push_back(n);
  }
  std::vector<int> expected = {1, 2, 3};
  for (int n = 7; n <= 75; n += 4) expected.push_back(n);
  EXPECT_EQ(computing, expected);
  EXPECT_EQ(computing.size(), 21u);
}

TEST(IndexSharingTest, SkipLayersPointAtNearestComputingLayerBelow) {
  IndexSharing sharing{4, 3};
  EXPECT_EQ(sharing.SourceLayer(4), 3);
  EXPECT_EQ(sharing.SourceLayer(6), 3);
  EXPECT_EQ(sharing.SourceLayer(7), 7);
  EXPECT_EQ(sharing.SourceLayer(21), 19);
  EXPECT_EQ(sharing.SourceLayer(41), 39);
  EXPECT_EQ(sharing.SourceLayer(61), 59);
  EXPECT_EQ(sharing.SourceLayer(78), 75);
}

TEST(IndexSharingTest, FrequencyOneComputesEverywhere) {
  IndexSharing sharing{1, 3};
  for (int n = 1; n <= 78; ++n) {
    EXPECT_TRUE(sharing.IsComputingLayer(n));
    EXPECT_EQ(sharing.SourceLayer(n), n);
  }
}

}  // namespace
}  // namespace glm
