// MoE router: sigmoid scores, group-limited top-k chosen by score + correction
// bias, weights from the unbiased scores (transformers' GlmMoeDsaTopkRouter).
#ifndef GLM_KERNELS_CPU_ROUTER_H_
#define GLM_KERNELS_CPU_ROUTER_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace glm::cpu {

void RouterForward(ConstMatrixView logits, const float* bias,
                   const RouterSpec& spec, MatrixView scores,
                   MatrixView weights, int32_t* indices);
void RouterBackward(ConstMatrixView scores, const int32_t* indices,
                    ConstMatrixView dweights, const RouterSpec& spec,
                    MatrixView dlogits);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_ROUTER_H_
