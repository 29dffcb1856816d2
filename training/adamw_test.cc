#include "training/adamw.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/separate_memory_allocator.h"

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

namespace glm {
namespace {

// Weights on a device get their moments in one allocation per moment, and the
// same updates as in host memory.
TEST(AdamWTest, DeviceMomentsLiveInOneAllocationEachAndUpdateAlike) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  const std::vector<std::vector<int64_t>> shapes = {{3, 4}, {5}, {2, 2, 3}};
  std::vector<Tensor> host_w, host_g;
  for (const auto& shape : shapes) {
    host_w.emplace_back(shape, nullptr);
    host_g.emplace_back(shape, nullptr);
    for (float& x : host_w.back().values()) x = normal(rng);
    for (float& x : host_g.back().values()) x = normal(rng);
  }
  SeparateMemoryAllocator device;
  std::vector<Tensor> device_w, device_g;
  for (size_t i = 0; i < shapes.size(); ++i) {
    device_w.push_back(host_w[i].CopyTo(&device));
    device_g.push_back(host_g[i].CopyTo(&device));
  }
  auto list = [](std::vector<Tensor>& w, std::vector<Tensor>& g) {
    std::vector<TrainableTensor> params;
    for (size_t i = 0; i < w.size(); ++i) {
      params.push_back({"t" + std::to_string(i), &w[i], &g[i]});
    }
    return params;
  };
  CpuBackend host_backend, device_backend(&device);
  AdamW on_host({}), on_device({});
  const int64_t before = device.allocations();
  for (int step = 0; step < 3; ++step) {
    on_host.Step(host_backend, list(host_w, host_g), 1e-2, 0.5);
    on_device.Step(device_backend, list(device_w, device_g), 1e-2, 0.5);
    EXPECT_EQ(device.allocations(), before + 2);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(device_w[i].CopyTo(nullptr).values(), host_w[i].values()) << i;
  }
}

}  // namespace
}  // namespace glm
