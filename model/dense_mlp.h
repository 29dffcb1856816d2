// SwiGLU MLP: down(silu(gate(x)) * up(x)). Used by dense layers and shared
// experts.
#ifndef GLM_MODEL_DENSE_MLP_H_
#define GLM_MODEL_DENSE_MLP_H_

#include "kernels/backend.h"
#include "model/parameters.h"

namespace glm {

struct MlpActivations {
  Tensor gate_up;  // [n, 2I]: gate(x) | up(x)
  Tensor hidden;   // [n, I]
};

// out = mlp(x), or out = mlp(x) + residual where residual is given (F32,
// out's shape: a residual stream's sum, formed by the down projection).
void MlpForward(Backend& backend, const MlpParameters& p, ConstMatrixView x,
                ConstMatrixView residual, MatrixView out, MlpActivations* acts);
// Accumulates weight gradients and dx.
void MlpBackward(Backend& backend, MlpParameters& p, ConstMatrixView x,
                 const MlpActivations& acts, ConstMatrixView dout,
                 MatrixView dx);

}  // namespace glm

#endif  // GLM_MODEL_DENSE_MLP_H_
