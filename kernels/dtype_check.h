// The dtype checks every backend runs on entry to its ops: views carry their
// dtype, and an op refuses one it does not take (kernels/backend.h names the
// few operands that may be the backend's activation type) before it reads a
// byte, naming the op and the operand's position.
#ifndef GLM_KERNELS_DTYPE_CHECK_H_
#define GLM_KERNELS_DTYPE_CHECK_H_

#include <initializer_list>

#include "kernels/tensor.h"

namespace glm {

// Aborts unless every non-empty view is F32.
void CheckF32(const char* op, std::initializer_list<ConstMatrixView> views);

// Aborts unless `view` (the op's operand called `operand`) is empty, F32 or
// `activation`.
void CheckActivation(const char* op, const char* operand, ConstMatrixView view,
                     ElementType activation);

}  // namespace glm

#endif  // GLM_KERNELS_DTYPE_CHECK_H_
