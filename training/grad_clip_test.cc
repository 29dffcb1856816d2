#include "training/grad_clip.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace glm {
namespace {

TEST(GradClipTest, NormOverAllTensors) {
  CpuBackend backend;
  Tensor w1({2}), g1({2}), w2({1, 1}), g2({1, 1});
  g1.values() = {3.f, 0.f};
  g2.values() = {4.f};
  const std::vector<TrainableTensor> params = {{"a", &w1, &g1},
                                               {"b", &w2, &g2}};
  EXPECT_DOUBLE_EQ(GradSquaredSum(backend, params), 25.0);
  EXPECT_DOUBLE_EQ(GlobalNorm(25.0), 5.0);
}

TEST(GradClipTest, ScaleOnlyAboveMax) {
  EXPECT_DOUBLE_EQ(ClipScale(0.5, 1.0), 1.0);
  EXPECT_NEAR(ClipScale(5.0, 1.0), 1.0 / (5.0 + 1e-6), 1e-15);
  EXPECT_DOUBLE_EQ(ClipScale(5.0, 0.0), 1.0);
}

TEST(GradClipTest, NanGradientGivesNonFiniteNorm) {
  CpuBackend backend;
  Tensor w({2}), g({2});
  g.values() = {1.f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_FALSE(
      std::isfinite(GlobalNorm(GradSquaredSum(backend, {{"a", &w, &g}}))));
  g.values() = {1.f, std::numeric_limits<float>::infinity()};
  EXPECT_FALSE(
      std::isfinite(GlobalNorm(GradSquaredSum(backend, {{"a", &w, &g}}))));
}

}  // namespace
}  // namespace glm
