// The optimizer's element-wise passes on the CPU: the gradient norm's sum of
// squares and AdamW (kernels/backend.h states both).
#ifndef GLM_KERNELS_CPU_OPTIMIZER_H_
#define GLM_KERNELS_CPU_OPTIMIZER_H_

#include <vector>

#include "kernels/backend.h"

namespace glm::cpu {

// Sequential in span order: the same bits on any thread count.
double SquaredSum(const std::vector<ConstFloatSpan>& spans);
// Elements are independent, so threads split them freely.
void AdamWStep(const AdamWHyperparameters& hyper,
               const std::vector<AdamWTensor>& tensors);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_OPTIMIZER_H_
