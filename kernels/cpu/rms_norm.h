// RMSNorm as transformers computes it: y = x * rsqrt(mean(x^2) + eps) * w.
#ifndef GLM_KERNELS_CPU_RMS_NORM_H_
#define GLM_KERNELS_CPU_RMS_NORM_H_

#include "kernels/tensor.h"

namespace glm::cpu {

void RmsNormForward(ConstMatrixView x, const float* w, float eps, MatrixView y,
                    float* rstd);
// dx += ... (dx = residual + ... where residual is given), dw += ... (dw
// accumulated serially over rows: deterministic).
void RmsNormBackward(ConstMatrixView x, const float* w, const float* rstd,
                     ConstMatrixView dy, ConstMatrixView residual,
                     MatrixView dx, float* dw);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_RMS_NORM_H_
