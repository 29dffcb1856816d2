// Linear layer without bias through OpenBLAS: y = x w^T, x [n, in], w [out,
// in].
#ifndef GLM_KERNELS_CPU_LINEAR_H_
#define GLM_KERNELS_CPU_LINEAR_H_

#include "kernels/tensor.h"

namespace glm::cpu {

void LinearForward(ConstMatrixView x, ConstMatrixView w, MatrixView y,
                   bool accumulate);
// dx += dy w; dw += dy^T x (each skipped when empty).
void LinearBackward(ConstMatrixView x, ConstMatrixView w, ConstMatrixView dy,
                    MatrixView dx, MatrixView dw);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_LINEAR_H_
