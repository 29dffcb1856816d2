// RMSNorm on the GPU: y = x * rsqrt(mean(x^2) + eps) * weight, rows of `dim` floats.
// Accumulates in fp32 as transformers does. Backward gives dx and accumulates dweight.
#ifndef GLM_KERNELS_CUDA_RMS_NORM_CUH_
#define GLM_KERNELS_CUDA_RMS_NORM_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace glm::cuda {

// x, y: [rows, dim]; weight: [dim]; rstd (out, may be null): [rows].
void RmsNormForward(const float* x, const float* weight, float* y, float* rstd,
                    int64_t rows, int64_t dim, float eps, cudaStream_t stream);

// dy, x: [rows, dim]; rstd from the forward; dx: [rows, dim];
// dweight: [dim], accumulated (+=).
void RmsNormBackward(const float* dy, const float* x, const float* weight,
                     const float* rstd, float* dx, float* dweight, int64_t rows,
                     int64_t dim, cudaStream_t stream);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_RMS_NORM_CUH_
