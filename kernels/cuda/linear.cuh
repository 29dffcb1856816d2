// Linear layer without bias through cuBLASLt: y = x w^T, x [n, in], w [out,
// in], all device views. The context's precision picks fp32 products (no
// TF32), TF32 products, or bf16 inputs; all accumulate in fp32 into fp32
// outputs.
#ifndef GLM_KERNELS_CUDA_LINEAR_CUH_
#define GLM_KERNELS_CUDA_LINEAR_CUH_

#include <cuda_bf16.h>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// y = x w^T (+ y when accumulate).
void Linear(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
            MatrixView y, bool accumulate);
// dx += dy w; dw += dy^T x (each skipped when empty).
void LinearBackward(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
                    ConstMatrixView dy, MatrixView dx, MatrixView dw);
// LinearBackward for a dy its producer wrote in bf16 (row-major [x.rows,
// w.rows], leading dimension dy_ld elements, 16-byte aligned rows preferred):
// the bf16 mode only.
void LinearBackwardBf16(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
                        const __nv_bfloat16* dy, int64_t dy_ld, MatrixView dx,
                        MatrixView dw);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_LINEAR_CUH_
