// LayerNorm with weight and bias on device views (the DSA indexer's k_norm):
// y = (x - mean) * rstd * w + b, row statistics in double.
#ifndef GLM_KERNELS_CUDA_LAYER_NORM_CUH_
#define GLM_KERNELS_CUDA_LAYER_NORM_CUH_

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// x, y: [rows, cols] (y may be x); w, b: [cols]; mean, rstd: [rows], written
// (either may be null).
void LayerNormForward(CudaContext& ctx, ConstMatrixView x, const float* w,
                      const float* b, float eps, MatrixView y, float* mean,
                      float* rstd);
// mean, rstd from the forward. dx += ... (skipped when empty); dw, db [cols]
// += ... (each skipped when null), summed over rows in a fixed order.
void LayerNormBackward(CudaContext& ctx, ConstMatrixView x, const float* w,
                       const float* mean, const float* rstd, ConstMatrixView dy,
                       MatrixView dx, float* dw, float* db);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_LAYER_NORM_CUH_
