// Element-wise ops on strided device views (copy, axpy, rows repeated into
// groups and summed back) and on a device scalar (a loss into its sum).
#ifndef GLM_KERNELS_CUDA_ELEMENTWISE_CUH_
#define GLM_KERNELS_CUDA_ELEMENTWISE_CUH_

#include <initializer_list>
#include <vector>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// y = x (shapes equal; each F32 or BF16, converted where they differ).
void Copy(CudaContext& ctx, ConstMatrixView x, MatrixView y);
// y = 0, one strided memset (an empty view: nothing).
void Zero(CudaContext& ctx, MatrixView y);
// y += alpha * x.
void Axpy(CudaContext& ctx, float alpha, ConstMatrixView x, MatrixView y);
// y[r * repeats + i] = x[r] (y F32 or BF16).
void RepeatRows(CudaContext& ctx, ConstMatrixView x, int64_t repeats,
                MatrixView y);
// y[r] += x[r * repeats + i] for i = 0, 1, ... in order (the CPU's order).
void SumRowGroups(CudaContext& ctx, ConstMatrixView x, int64_t repeats,
                  MatrixView y);
// F32 stand-ins for kernels that read and write F32 only: each F32 view as
// it is, each BF16 one (the activation type) replaced by a dense F32 copy
// carved from the composite scratch; the inputs' copies hold their values,
// the outputs' copies are unfilled. Returns the inputs' views, then the
// outputs'. FromF32 writes an output's copy back to a BF16 view.
std::vector<MatrixView> AsF32(CudaContext& ctx,
                              std::initializer_list<ConstMatrixView> inputs,
                              std::initializer_list<MatrixView> outputs = {});
void FromF32(CudaContext& ctx, ConstMatrixView f32, MatrixView original);

// *sum += *value / divisor, for one device double each (a loss op's value
// into its caller's sum).
void AddQuotient(CudaContext& ctx, const double* value, double divisor,
                 double* sum);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ELEMENTWISE_CUH_
