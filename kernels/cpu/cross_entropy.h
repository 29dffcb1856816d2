// Softmax cross-entropy over rows of logits; rows whose target is negative are
// ignored.
#ifndef GLM_KERNELS_CPU_CROSS_ENTROPY_H_
#define GLM_KERNELS_CPU_CROSS_ENTROPY_H_

#include <cstdint>

#include "kernels/tensor.h"

namespace glm::cpu {

// Sum of the per-row losses (the caller divides by the count it wants).
double CrossEntropyForward(ConstMatrixView logits, const int32_t* targets);
void CrossEntropyBackward(ConstMatrixView logits, const int32_t* targets,
                          float scale, MatrixView dlogits);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_CROSS_ENTROPY_H_
