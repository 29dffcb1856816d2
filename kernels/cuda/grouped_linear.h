// Backend::GroupedLinear / GroupedLinearBackward on the GPU: each expert's
// rows against its slab of a stacked [experts * out, in] weight.
#ifndef GLM_KERNELS_CUDA_GROUPED_LINEAR_H_
#define GLM_KERNELS_CUDA_GROUPED_LINEAR_H_

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// bf16 mode: one CUTLASS grouped GEMM per product (kernels/cuda/
// grouped_gemm.cuh) on bf16 copies of the operands; the expert sizes never
// leave the device. fp32 mode (and shapes the grouped GEMM does not take):
// per expert through cuBLASLt (kernels/cuda/linear.cuh) after reading the
// offsets to the host, one stream synchronization per call.
// Rows read by index (IndexedRows) are gathered and scaled by the bf16 copy
// as it converts.
void GroupedLinear(CudaContext& ctx, IndexedRows x, ConstMatrixView w,
                   const int32_t* offsets, int64_t experts, MatrixView y);
void GroupedLinearBackward(CudaContext& ctx, IndexedRows x, ConstMatrixView w,
                           const int32_t* offsets, int64_t experts,
                           IndexedRows dy, MatrixView dx, bool accumulate_dx,
                           MatrixView dw);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_GROUPED_LINEAR_H_
