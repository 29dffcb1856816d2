#include "training/router_bias.h"

#include <algorithm>
#include <cassert>
#include <numeric>

namespace glm {
namespace {

double MeanLoad(const std::vector<int64_t>& load) {
  return static_cast<double>(
             std::accumulate(load.begin(), load.end(), int64_t{0})) /
         static_cast<double>(load.size());
}

}  // namespace

void UpdateRouterBias(const std::vector<int64_t>& expert_load, double rate,
                      Tensor* bias) {
  assert(static_cast<int64_t>(expert_load.size()) == bias->numel());
  const double mean = MeanLoad(expert_load);
  for (size_t i = 0; i < expert_load.size(); ++i) {
    const double error = mean - static_cast<double>(expert_load[i]);
    const double sign = (error > 0) - (error < 0);
    bias->data()[i] += static_cast<float>(rate * sign);
  }
}

double LoadImbalance(const std::vector<int64_t>& expert_load) {
  if (expert_load.empty()) return 0;
  const double mean = MeanLoad(expert_load);
  if (mean == 0) return 0;
  return *std::max_element(expert_load.begin(), expert_load.end()) / mean;
}

}  // namespace glm
