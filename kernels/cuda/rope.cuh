// Interleaved rotary position embedding on device views (DeepSeek/GLM
// layout): pairs (x[2i], x[2i+1]) rotate by angle pos * theta^(-2i/R), R =
// cols; the output is in half layout [x0 cos - x1 sin | x1 cos + x0 sin].
#ifndef GLM_KERNELS_CUDA_ROPE_CUH_
#define GLM_KERNELS_CUDA_ROPE_CUH_

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// Largest rotary dimension R (the views' cols) the kernels take.
constexpr int64_t kMaxRotaryDim = 512;

// Row r uses positions[r / rows_per_position] (device int32 array). x, y:
// [rows, R], R even and at most kMaxRotaryDim; y (F32 or BF16) is written.
void RopeForward(CudaContext& ctx, ConstMatrixView x, const int32_t* positions,
                 int64_t rows_per_position, float theta, MatrixView y);
// The transpose (inverse) rotation, half layout in, interleaved out; dx is
// written. dy and dx F32 or BF16.
void RopeBackward(CudaContext& ctx, ConstMatrixView dy,
                  const int32_t* positions, int64_t rows_per_position,
                  float theta, MatrixView dx);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ROPE_CUH_
