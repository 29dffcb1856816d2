#include "training/router_bias.h"

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(RouterBiasTest, MovesTowardsBalance) {
  Tensor bias({4});
  // Mean load 4: expert 0 overloaded, 1 and 2 underloaded, 3 exactly balanced.
  UpdateRouterBias({10, 1, 1, 4}, 0.001, &bias);
  EXPECT_FLOAT_EQ(bias.data()[0], -0.001f);
  EXPECT_FLOAT_EQ(bias.data()[1], 0.001f);
  EXPECT_FLOAT_EQ(bias.data()[2], 0.001f);
  EXPECT_FLOAT_EQ(bias.data()[3], 0.f);
}

TEST(RouterBiasTest, ImbalanceIsMaxOverMean) {
  EXPECT_DOUBLE_EQ(LoadImbalance({10, 1, 1, 4}), 2.5);
  EXPECT_DOUBLE_EQ(LoadImbalance({3, 3, 3}), 1.0);
  EXPECT_DOUBLE_EQ(LoadImbalance({0, 0}), 0.0);
}

}  // namespace
}  // namespace glm
