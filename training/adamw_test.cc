#include "training/adamw.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace glm {
namespace {

// torch.optim.AdamW's update written out in double for one scalar trajectory.
struct ScalarAdamW {
  double w, m = 0, v = 0;
  int t = 0;
  void Step(double g, double lr, double b1, double b2, double eps, double wd) {
    ++t;
    w -= lr * wd * w;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mhat = m / (1 - std::pow(b1, t));
    const double vhat = v / (1 - std::pow(b2, t));
    w -= lr * mhat / (std::sqrt(vhat) + eps);
  }
};

TEST(AdamWTest, MatchesTorchFormulaOverSteps) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  Tensor weight({3, 4}), grad({3, 4});
  for (float& x : weight.values()) x = normal(rng);
  std::vector<ScalarAdamW> expected;
  for (float x : weight.values()) expected.push_back({x});

  const AdamWOptions options{0.9, 0.95, 1e-8, 0.1};
  CpuBackend backend;
  AdamW adamw(options);
  for (int step = 0; step < 5; ++step) {
    for (float& x : grad.values()) x = normal(rng);
    const double lr = 1e-2 * (step + 1);
    adamw.Step(backend, {{"w", &weight, &grad}}, lr, 0.5);
    for (int64_t i = 0; i < weight.numel(); ++i) {
      expected[i].Step(0.5 * grad.values()[i], lr, 0.9, 0.95, 1e-8, 0.1);
    }
  }
  for (int64_t i = 0; i < weight.numel(); ++i) {
    EXPECT_NEAR(weight.values()[i], expected[i].w, 1e-6) << i;
  }
  EXPECT_EQ(adamw.steps(), 5);
}

TEST(AdamWTest, NoWeightDecayOnNormsAndBiases) {
  Tensor norm({4}), grad({4});
  for (float& x : norm.values()) x = 1.f;
  CpuBackend backend;
  AdamW adamw(AdamWOptions{0.9, 0.95, 1e-8, 0.5});
  adamw.Step(backend, {{"model.norm.weight", &norm, &grad}}, 1.0, 1.0);
  // Zero gradient and no decay: the weight stays exactly where it was.
  for (float x : norm.values()) EXPECT_EQ(x, 1.f);
  EXPECT_FALSE(TakesWeightDecay(norm));
  EXPECT_TRUE(TakesWeightDecay(Tensor({2, 2})));
}

}  // namespace
}  // namespace glm
