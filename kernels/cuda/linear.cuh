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

// y = x w^T (+ y when accumulate). x F32 or BF16; y F32, or BF16 (rounded
// once from the fp32 result) without accumulate.
void Linear(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
            MatrixView y, bool accumulate);
// y = x w^T + addend (F32, y's shape, may be y); y F32, written.
void LinearAdd(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
               ConstMatrixView addend, MatrixView y);
// For each group h < groups: y_h = x_h w_h^T, where x_h is rows h, h +
// groups, h + 2 groups, ... of x [n*groups, in] (one head's rows of a
// token-major, head-minor matrix), w_h the same rows of w [m*groups, in],
// and y_h [n, m] the contiguous block at y + h*n*m. One batched product (in
// the bf16 mode over one bf16 copy of x and of w).
void InterleavedLinear(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
                       int64_t groups, float* y);
// dx += dy w (a BF16 dx: dx = dy w, rounded once); dw += dy^T x (each
// skipped when empty).
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
