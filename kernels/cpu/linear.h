// Linear layer without bias through OpenBLAS: y = x w^T, x [n, in], w [out,
// in].
#ifndef GLM_KERNELS_CPU_LINEAR_H_
#define GLM_KERNELS_CPU_LINEAR_H_

#include <cstdint>

#include "kernels/tensor.h"

namespace glm::cpu {

void LinearForward(ConstMatrixView x, ConstMatrixView w, MatrixView y,
                   bool accumulate);
// dx += dy w; dw += dy^T x (each skipped when empty).
void LinearBackward(ConstMatrixView x, ConstMatrixView w, ConstMatrixView dy,
                    MatrixView dx, MatrixView dw);

// Per expert e, rows [offsets[e], offsets[e+1]) against w's rows [e*out,
// (e+1)*out) (Backend::GroupedLinear / GroupedLinearBackward); rows read by
// index are gathered (and scaled) one expert at a time.
void GroupedLinearForward(IndexedRows x, ConstMatrixView w,
                          const int32_t* offsets, int64_t experts,
                          MatrixView y);
void GroupedLinearBackward(IndexedRows x, ConstMatrixView w,
                           const int32_t* offsets, int64_t experts,
                           IndexedRows dy, MatrixView dx, MatrixView dw);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_LINEAR_H_
