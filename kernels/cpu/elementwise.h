// Element-wise ops on strided views: copy, zero, axpy, and rows repeated into
// groups and summed back.
#ifndef GLM_KERNELS_CPU_ELEMENTWISE_H_
#define GLM_KERNELS_CPU_ELEMENTWISE_H_

#include "kernels/tensor.h"

namespace glm::cpu {

void Copy(ConstMatrixView x, MatrixView y);
// y = 0 (an empty view: nothing).
void Zero(MatrixView y);
void Axpy(float alpha, ConstMatrixView x, MatrixView y);
void RepeatRows(ConstMatrixView x, int64_t repeats, MatrixView y);
void SumRowGroups(ConstMatrixView x, int64_t repeats, MatrixView y);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_ELEMENTWISE_H_
