// Element-wise ops on strided device views: copy and axpy.
#ifndef GLM_KERNELS_CUDA_ELEMENTWISE_CUH_
#define GLM_KERNELS_CUDA_ELEMENTWISE_CUH_

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// y = x (shapes equal).
void Copy(CudaContext& ctx, ConstMatrixView x, MatrixView y);
// y += alpha * x.
void Axpy(CudaContext& ctx, float alpha, ConstMatrixView x, MatrixView y);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ELEMENTWISE_CUH_
