// Aux-loss-free load balancing (DeepSeek-V3, Megatron's
// moe_router_enable_expert_bias): after each step every MoE layer's
// e_score_correction_bias moves by `rate` towards balance, b_i += rate *
// sign(mean_load - load_i). The bias only steers expert selection; it never
// receives a gradient.
#ifndef GLM_TRAINING_ROUTER_BIAS_H_
#define GLM_TRAINING_ROUTER_BIAS_H_

#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace glm {

void UpdateRouterBias(const std::vector<int64_t>& expert_load, double rate,
                      Tensor* bias);

// Max over mean tokens per expert; 1 is perfect balance, 0 when nothing was
// routed.
double LoadImbalance(const std::vector<int64_t>& expert_load);

}  // namespace glm

#endif  // GLM_TRAINING_ROUTER_BIAS_H_
