// Element-wise ops on strided device views (copy, axpy, rows repeated into
// groups and summed back) and on a device scalar (a loss into its sum).
#ifndef GLM_KERNELS_CUDA_ELEMENTWISE_CUH_
#define GLM_KERNELS_CUDA_ELEMENTWISE_CUH_

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// y = x (shapes equal).
void Copy(CudaContext& ctx, ConstMatrixView x, MatrixView y);
// y = 0, one strided memset (an empty view: nothing).
void Zero(CudaContext& ctx, MatrixView y);
// y += alpha * x.
void Axpy(CudaContext& ctx, float alpha, ConstMatrixView x, MatrixView y);
// y[r * repeats + i] = x[r].
void RepeatRows(CudaContext& ctx, ConstMatrixView x, int64_t repeats,
                MatrixView y);
// y[r] += x[r * repeats + i] for i = 0, 1, ... in order (the CPU's order).
void SumRowGroups(CudaContext& ctx, ConstMatrixView x, int64_t repeats,
                  MatrixView y);
// *sum += *value / divisor, for one device double each (a loss op's value
// into its caller's sum).
void AddQuotient(CudaContext& ctx, const double* value, double divisor,
                 double* sum);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ELEMENTWISE_CUH_
