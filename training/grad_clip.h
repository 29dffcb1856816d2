// Global gradient norm and clipping, as Megatron's clip_grad_norm_fp32: the L2
// norm over every gradient, and a scale min(1, max_norm / (norm + 1e-6))
// applied in the update.
#ifndef GLM_TRAINING_GRAD_CLIP_H_
#define GLM_TRAINING_GRAD_CLIP_H_

#include <vector>

#include "training/adamw.h"

namespace glm {

// Sum of squares of every gradient element, accumulated in double in a fixed
// order (deterministic). Data-parallel ranks all-reduce this before the square
// root.
// `backend` reads the gradients where they live.
double GradSquaredSum(Backend& backend,
                      const std::vector<TrainableTensor>& params);

// Infinite or NaN when any gradient is.
double GlobalNorm(double squared_sum);

// 1 when no clipping applies (max_norm <= 0 turns clipping off).
double ClipScale(double global_norm, double max_norm);

}  // namespace glm

#endif  // GLM_TRAINING_GRAD_CLIP_H_
