#include "base/bf16.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(Float32ToBfloat16(1.f), 0x3f80);
  EXPECT_EQ(Float32ToBfloat16(1.f + std::ldexp(1.f, -8)), 0x3f80);  // tie, even
  EXPECT_EQ(Float32ToBfloat16(1.f + 3 * std::ldexp(1.f, -8)), 0x3f82);
  EXPECT_EQ(Float32ToBfloat16(-2.f), 0xc000);
  EXPECT_EQ(Float32ToBfloat16(std::nanf("")) & 0x7fc0, 0x7fc0);
}

TEST(Bf16Test, WidensExactly) {
  EXPECT_EQ(Bfloat16ToFloat32(0x3f80), 1.f);
  EXPECT_EQ(Bfloat16ToFloat32(0xc000), -2.f);
  EXPECT_EQ(Bfloat16ToFloat32(0x7f80), std::numeric_limits<float>::infinity());
  for (float value : {0.1f, -3.75f, 1e-30f, 6.5e4f}) {
    const float narrowed = Bfloat16ToFloat32(Float32ToBfloat16(value));
    EXPECT_EQ(Float32ToBfloat16(narrowed), Float32ToBfloat16(value));
    EXPECT_LE(std::abs(narrowed - value),
              std::abs(value) * std::ldexp(1.f, -8));
  }
}

}  // namespace
}  // namespace glm
