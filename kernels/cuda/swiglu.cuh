// SwiGLU activation on device views: out = silu(gate) * up.
#ifndef GLM_KERNELS_CUDA_SWIGLU_CUH_
#define GLM_KERNELS_CUDA_SWIGLU_CUH_

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// gate, up, out: [rows, cols], each F32 or BF16.
void SwiGluForward(CudaContext& ctx, ConstMatrixView gate, ConstMatrixView up,
                   MatrixView out);
// dgate = dout * up * silu'(gate); dup = dout * silu(gate) (each written, not
// added; skipped when empty); every view F32 or BF16.
void SwiGluBackward(CudaContext& ctx, ConstMatrixView gate, ConstMatrixView up,
                    ConstMatrixView dout, MatrixView dgate, MatrixView dup);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_SWIGLU_CUH_
