// SwiGLU activation: out = silu(gate) * up.
#ifndef GLM_KERNELS_CPU_SWIGLU_H_
#define GLM_KERNELS_CPU_SWIGLU_H_

#include "kernels/tensor.h"

namespace glm::cpu {

void SwiGluForward(ConstMatrixView gate, ConstMatrixView up, MatrixView out);
void SwiGluBackward(ConstMatrixView gate, ConstMatrixView up,
                    ConstMatrixView dout, MatrixView dgate, MatrixView dup);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_SWIGLU_H_
