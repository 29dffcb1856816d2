#include "kernels/cuda/bf16_copy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"

namespace glm::cuda {
namespace {

__device__ bool RowKept(const int32_t* keep, int64_t row,
                        int64_t rows_per_token) {
  return keep == nullptr || keep[row / rows_per_token] != 0;
}

__global__ void PackBf16Kernel(ConstMatrixView x, const int32_t* keep,
                               int64_t rows_per_token, __nv_bfloat16* out) {
  ForEachElement(x.rows, x.cols, [&](int64_t r, int64_t c) {
    const float value = RowKept(keep, r, rows_per_token) ? At(x, r, c) : 0.f;
    out[r * x.cols + c] = __float2bfloat16(value);
  });
}

__global__ void UnpackBf16Kernel(const __nv_bfloat16* x, const int32_t* keep,
                                 int64_t rows_per_token, bool accumulate,
                                 MatrixView y) {
  ForEachElement(y.rows, y.cols, [&](int64_t r, int64_t c) {
    const float value = RowKept(keep, r, rows_per_token)
                            ? __bfloat162float(x[r * y.cols + c])
                            : 0.f;
    float& out = At(y, r, c);
    out = accumulate ? out + value : value;
  });
}

}  // namespace

void PackBf16(CudaContext& ctx, ConstMatrixView x, const int32_t* keep,
              int64_t rows_per_token, __nv_bfloat16* out) {
  PackBf16Kernel<<<GridStrideBlocks(x.rows * x.cols), kBlockThreads, 0,
                   ctx.stream()>>>(x, keep, rows_per_token, out);
  GLM_CUDA_CHECK_LAUNCH();
}

void UnpackBf16(CudaContext& ctx, const __nv_bfloat16* x, const int32_t* keep,
                int64_t rows_per_token, bool accumulate, MatrixView y) {
  UnpackBf16Kernel<<<GridStrideBlocks(y.rows * y.cols), kBlockThreads, 0,
                     ctx.stream()>>>(x, keep, rows_per_token, accumulate, y);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
