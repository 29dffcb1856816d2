#include <cassert>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/rms_norm.cuh"

namespace glm::cuda {
namespace {

// One block per row. The sum of squares is in double and the reciprocal
// square root in IEEE float, as on the CPU.
__global__ void RmsNormForwardKernel(ConstMatrixView x, const float* w,
                                     float eps, MatrixView y, float* rstd) {
  const int64_t r = blockIdx.x;
  double sum_sq = 0;
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {
    const float v = At(x, r, c);
    sum_sq += double{v} * v;
  }
  const float inv =
      1.f / sqrtf(static_cast<float>(BlockSum(sum_sq) / x.cols) + eps);
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {
    At(y, r, c) = w[c] * (At(x, r, c) * inv);
  }
  if (rstd != nullptr && threadIdx.x == 0) rstd[r] = inv;
}

// dx += inv * (g - xhat * mean(g . xhat)), g = dy * w, xhat = x * inv.
__global__ void RmsNormBackwardKernel(ConstMatrixView x, const float* w,
                                      const float* rstd, ConstMatrixView dy,
                                      MatrixView dx) {
  const int64_t r = blockIdx.x;
  const float inv = rstd[r];
  double dot = 0;
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {
    dot += double{At(dy, r, c)} * w[c] * At(x, r, c) * inv;
  }
  const float mean_dot = static_cast<float>(BlockSum(dot) / x.cols);
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {
    At(dx, r, c) += inv * (At(dy, r, c) * w[c] - At(x, r, c) * inv * mean_dot);
  }
}

// dw[c] = sum over rows of dy * x * rstd.
struct WeightGradTerm {
  ConstMatrixView x;
  ConstMatrixView dy;
  const float* rstd;

  __device__ void operator()(int64_t r, int64_t c, double (&acc)[1]) const {
    acc[0] += double{At(dy, r, c)} * At(x, r, c) * rstd[r];
  }
};

}  // namespace

void RmsNormForward(CudaContext& ctx, ConstMatrixView x, const float* w,
                    float eps, MatrixView y, float* rstd) {
  assert(x.rows == y.rows && x.cols == y.cols);
  if (x.rows == 0 || x.cols == 0) return;
  RmsNormForwardKernel<<<x.rows, RowBlockThreads(x.cols), 0, ctx.stream()>>>(
      x, w, eps, y, rstd);
  GLM_CUDA_CHECK_LAUNCH();
}

void RmsNormBackward(CudaContext& ctx, ConstMatrixView x, const float* w,
                     const float* rstd, ConstMatrixView dy, MatrixView dx,
                     float* dw) {
  assert(dy.rows == x.rows && dy.cols == x.cols);
  assert(dx.empty() || (dx.rows == x.rows && dx.cols == x.cols));
  if (x.rows == 0 || x.cols == 0) return;
  if (!dx.empty()) {
    RmsNormBackwardKernel<<<x.rows, RowBlockThreads(x.cols), 0, ctx.stream()>>>(
        x, w, rstd, dy, dx);
    GLM_CUDA_CHECK_LAUNCH();
  }
  if (dw != nullptr) {
    void* scratch = ctx.Scratch(ColumnSumsBytes<1>(x.rows, x.cols));
    ColumnSums<1>(WeightGradTerm{x, dy, rstd}, x.rows, x.cols,
                  ColumnOutputs<1>{{dw}}, scratch, ctx.stream());
  }
}

}  // namespace glm::cuda
