// LayerNorm with weight and bias (the DSA indexer's k_norm).
#ifndef GLM_KERNELS_CPU_LAYER_NORM_H_
#define GLM_KERNELS_CPU_LAYER_NORM_H_

#include "kernels/tensor.h"

namespace glm::cpu {

void LayerNormForward(ConstMatrixView x, const float* w, const float* b,
                      float eps, MatrixView y, float* mean, float* rstd);
void LayerNormBackward(ConstMatrixView x, const float* w, const float* mean,
                       const float* rstd, ConstMatrixView dy, MatrixView dx,
                       float* dw, float* db);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_LAYER_NORM_H_
