#include "training/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace glm {
namespace {

// The seeds' pretrain recipe: lr 3e-4, min 3e-5, warmup 40, decay 100.
constexpr LrSchedule kPretrain{3e-4, 3e-5, 40, 100};

TEST(LrScheduleTest, LinearWarmup) {
  EXPECT_DOUBLE_EQ(kPretrain.At(0), 0.0);
  EXPECT_DOUBLE_EQ(kPretrain.At(1), 3e-4 / 40);
  EXPECT_DOUBLE_EQ(kPretrain.At(20), 1.5e-4);
  EXPECT_DOUBLE_EQ(kPretrain.At(40), 3e-4);
}

TEST(LrScheduleTest, CosineDecayToMin) {
  // Halfway through the decay the cosine factor is exactly 0.5.
  EXPECT_NEAR(kPretrain.At(70), 3e-5 + 0.5 * (3e-4 - 3e-5), 1e-15);
  // A quarter in: 0.5 * (cos(pi/4) + 1).
  const double quarter = 0.5 * (std::cos(M_PI / 4) + 1);
  EXPECT_NEAR(kPretrain.At(55), 3e-5 + quarter * (3e-4 - 3e-5), 1e-15);
  EXPECT_DOUBLE_EQ(kPretrain.At(100), 3e-5);
  EXPECT_DOUBLE_EQ(kPretrain.At(250), 3e-5);
}

TEST(LrScheduleTest, MonotoneAfterWarmup) {
  for (int64_t i = 41; i <= 100; ++i) {
    EXPECT_LE(kPretrain.At(i), kPretrain.At(i - 1)) << i;
  }
}

TEST(LrScheduleTest, NoWarmupStartsAtMax) {
  const LrSchedule schedule{1e-3, 1e-4, 0, 10};
  EXPECT_DOUBLE_EQ(schedule.At(0), 1e-3);
}

TEST(LrScheduleTest, ValidateNamesTheField) {
  EXPECT_NE(LrSchedule({0, 0, 0, 1}).Validate().message().find("training.lr"),
            std::string::npos);
  EXPECT_NE(LrSchedule({1e-3, 1e-2, 0, 1}).Validate().message().find("min_lr"),
            std::string::npos);
  EXPECT_NE(
      LrSchedule({1e-3, 0, 10, 5}).Validate().message().find("lr_decay_iters"),
      std::string::npos);
  EXPECT_TRUE(kPretrain.Validate().ok());
}

}  // namespace
}  // namespace glm
