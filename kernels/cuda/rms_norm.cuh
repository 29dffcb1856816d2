// RMSNorm on device views, as transformers computes it:
// y = x * rsqrt(mean(x^2) + eps) * w, with the mean of squares in double.
#ifndef GLM_KERNELS_CUDA_RMS_NORM_CUH_
#define GLM_KERNELS_CUDA_RMS_NORM_CUH_

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// x, y: [rows, cols] (y may be x when both are F32; y may be BF16); w:
// [cols]; rstd (may be null): [rows], written.
void RmsNormForward(CudaContext& ctx, ConstMatrixView x, const float* w,
                    float eps, MatrixView y, float* rstd);
// rstd from the forward. dx += ... (skipped when empty; dx = residual + ...
// where residual is given); dw [cols] += ... (skipped when null), summed over
// rows in a fixed order.
void RmsNormBackward(CudaContext& ctx, ConstMatrixView x, const float* w,
                     const float* rstd, ConstMatrixView dy,
                     ConstMatrixView residual, MatrixView dx, float* dw);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_RMS_NORM_CUH_
