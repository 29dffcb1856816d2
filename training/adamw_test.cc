#include "training/adamw.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "kernels/tensor_arena.h"

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

// Weights and gradients as a device model holds them (one arena each), and
// the same in host memory (a tensor each).
struct TwoPlaces {
  std::vector<Tensor> host_w, host_g, device_w, device_g;

  TwoPlaces(Allocator* device,
            const std::vector<std::vector<int64_t>>& shapes) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    device_w = ZerosInOneAllocation(device, shapes);
    device_g = ZerosInOneAllocation(device, shapes);
    for (size_t i = 0; i < shapes.size(); ++i) {
      host_w.emplace_back(shapes[i], nullptr);
      host_g.emplace_back(shapes[i], nullptr);
      for (float& x : host_w.back().values()) x = normal(rng);
      for (float& x : host_g.back().values()) x = normal(rng);
      device_w[i].CopyFrom(host_w[i]);
      device_g[i].CopyFrom(host_g[i]);
    }
  }
};

std::vector<TrainableTensor> Listed(std::vector<Tensor>& w,
                                    std::vector<Tensor>& g) {
  std::vector<TrainableTensor> params;
  for (size_t i = 0; i < w.size(); ++i) {
    params.push_back({"t" + std::to_string(i), &w[i], &g[i]});
  }
  return params;
}

// Weights on a device get their moments at their first step in one
// allocation per moment kind, laid out like the weights' arena, and take
// exactly the updates host memory takes.
TEST(AdamWTest, DeviceMomentsAreFlatViewsAndUpdateBitwiseAsOnTheHost) {
  SeparateMemoryAllocator device;
  TwoPlaces t(&device, {{3, 5}, {7}, {2, 2, 3}});
  CpuBackend host_backend, device_backend(&device);
  AdamW on_host({}), on_device({});
  const int64_t before = device.allocations();
  for (int step = 0; step < 3; ++step) {
    on_host.Step(host_backend, Listed(t.host_w, t.host_g), 1e-2, 0.5);
    on_device.Step(device_backend, Listed(t.device_w, t.device_g), 1e-2, 0.5);
    EXPECT_EQ(device.allocations(), before + 2);
  }
  const std::vector<AdamMoments*> host =
      on_host.MomentsOf(Listed(t.host_w, t.host_g));
  const std::vector<AdamMoments*> flat =
      on_device.MomentsOf(Listed(t.device_w, t.device_g));
  EXPECT_EQ(device.allocations(), before + 2);
  for (size_t i = 0; i < flat.size(); ++i) {
    const std::ptrdiff_t offset = t.device_w[i].data() - t.device_w[0].data();
    EXPECT_EQ(flat[i]->exp_avg.data() - flat[0]->exp_avg.data(), offset) << i;
    EXPECT_EQ(flat[i]->exp_avg_sq.data() - flat[0]->exp_avg_sq.data(), offset)
        << i;
    EXPECT_EQ(flat[i]->exp_avg.shape(), t.device_w[i].shape()) << i;
    EXPECT_EQ(t.device_w[i].CopyTo(nullptr).values(), t.host_w[i].values())
        << i;
    EXPECT_EQ(flat[i]->exp_avg.CopyTo(nullptr).values(),
              host[i]->exp_avg.HostValues())
        << i;
    EXPECT_EQ(flat[i]->exp_avg_sq.CopyTo(nullptr).values(),
              host[i]->exp_avg_sq.HostValues())
        << i;
  }
}

// The moments one call makes share their buffers; a later call's new ones
// get buffers of their own, freed whole when released.
TEST(AdamWTest, MomentsMadeLaterGetTheirOwnBuffers) {
  SeparateMemoryAllocator device;
  TwoPlaces t(&device, {{4, 4}, {9}, {3}});
  std::vector<TrainableTensor> all = Listed(t.device_w, t.device_g);
  AdamW adamw({});
  const int64_t before = device.allocations();
  const int64_t bytes = device.bytes_in_use();
  const std::vector<AdamMoments*> first = adamw.MomentsOf({all[0], all[1]});
  EXPECT_EQ(device.allocations(), before + 2);
  EXPECT_EQ(device.bytes_in_use(),
            bytes + 2 * (ArenaBytes(16) + ArenaBytes(9)));
  const std::vector<AdamMoments*> again = adamw.MomentsOf(all);
  EXPECT_EQ(again[0], first[0]);
  EXPECT_EQ(again[1], first[1]);
  EXPECT_EQ(device.allocations(), before + 4);
  adamw.ReleaseMomentsExcept({"t0", "t1"});
  EXPECT_EQ(device.allocations(), before + 2);
  EXPECT_EQ(device.bytes_in_use(),
            bytes + 2 * (ArenaBytes(16) + ArenaBytes(9)));
}

}  // namespace
}  // namespace glm
