#include "cli/step_rate.h"

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(StepRateTest, NoEstimateBeforeAnyStep) {
  StepRate rate;
  EXPECT_FALSE(rate.Remaining(100).has_value());
}

TEST(StepRateTest, FirstStepUsesItsOwnTime) {
  StepRate rate;
  rate.Observe(1, absl::UnixEpoch(), absl::Milliseconds(500));
  EXPECT_EQ(*rate.Remaining(11), absl::Seconds(5));
}

TEST(StepRateTest, WallClockRateReplacesTheStepTime) {
  StepRate rate;
  const absl::Time start = absl::UnixEpoch();
  rate.Observe(1, start, absl::Milliseconds(500));
  // Two iterations in 4 s: 2 s each (a checkpoint save in between).
  rate.Observe(3, start + absl::Seconds(4), absl::Milliseconds(500));
  EXPECT_EQ(*rate.Remaining(13), absl::Seconds(20));
}

TEST(StepRateTest, OneOutlierMovesTheEstimateByItsWeightOnly) {
  StepRate rate(0.2);
  absl::Time now = absl::UnixEpoch();
  rate.Observe(0, now, absl::Seconds(1));
  for (int i = 1; i <= 10; ++i) {
    now += absl::Seconds(1);
    rate.Observe(i, now, absl::Seconds(1));
  }
  EXPECT_EQ(*rate.Remaining(20), absl::Seconds(10));
  now += absl::Seconds(11);  // one step took 11 s
  rate.Observe(11, now, absl::Seconds(1));
  // 0.8 * 1 s + 0.2 * 11 s = 3 s per step, 9 steps left.
  EXPECT_NEAR(absl::ToDoubleSeconds(*rate.Remaining(20)), 27.0, 1e-9);
}

TEST(StepRateTest, RepeatedIterationChangesNothing) {
  StepRate rate;
  rate.Observe(5, absl::UnixEpoch(), absl::Seconds(2));
  rate.Observe(5, absl::UnixEpoch() + absl::Seconds(30), absl::Seconds(2));
  EXPECT_EQ(*rate.Remaining(6), absl::Seconds(2));
}

}  // namespace
}  // namespace glm
