// The optimizer's element-wise passes on the GPU, each one launch over every
// tensor (a multi-tensor pass: a table of chunks, one block per chunk).
#ifndef GLM_KERNELS_CUDA_OPTIMIZER_CUH_
#define GLM_KERNELS_CUDA_OPTIMIZER_CUH_

#include <cuda_bf16.h>

#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_context.h"

namespace glm::cuda {

// Writes the sum of x^2 over the spans (double; chunk sums in a fixed order)
// to the device double `out`.
void SquaredSum(CudaContext& ctx, const std::vector<ConstFloatSpan>& spans,
                double* out);
// The CPU's AdamW formula with the same double operations in the same order
// (no fused multiply-adds), so each element's result equals the CPU's bits.
// copies[i] (null: none) gets tensor i's new weights rounded to bf16 (to
// nearest even, as PackBf16 rounds), in the same pass.
void AdamWStep(CudaContext& ctx, const AdamWHyperparameters& hyper,
               const std::vector<AdamWTensor>& tensors,
               const std::vector<__nv_bfloat16*>& copies);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_OPTIMIZER_CUH_
