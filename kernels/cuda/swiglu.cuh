// SwiGLU activation on device views: out = silu(gate) * up.
#ifndef GLM_KERNELS_CUDA_SWIGLU_CUH_
#define GLM_KERNELS_CUDA_SWIGLU_CUH_

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// gate, up, out: [rows, cols]; out F32 or BF16.
void SwiGluForward(CudaContext& ctx, ConstMatrixView gate, ConstMatrixView up,
                   MatrixView out);
// dgate = dout * up * silu'(gate); dup = dout * silu(gate) (each written, not
// added, F32 or BF16; skipped when empty).
void SwiGluBackward(CudaContext& ctx, ConstMatrixView gate, ConstMatrixView up,
                    ConstMatrixView dout, MatrixView dgate, MatrixView dup);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_SWIGLU_CUH_
