#include <cassert>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/layer_norm.cuh"

namespace glm::cuda {
namespace {

// One block per row; mean and variance in double (two passes), as on the CPU.
__global__ void LayerNormForwardKernel(ConstMatrixView x, const float* w,
                                       const float* b, float eps, MatrixView y,
                                       float* mean, float* rstd) {
  const int64_t r = blockIdx.x;
  const int64_t n = x.cols;
  double sum = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) sum += At(x, r, c);
  const double mu = BlockSum(sum) / n;
  double var = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const double centered = At(x, r, c) - mu;
    var += centered * centered;
  }
  const float inv = static_cast<float>(1.0 / sqrt(BlockSum(var) / n + eps));
  const float mu_f = static_cast<float>(mu);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    At(y, r, c) = (At(x, r, c) - mu_f) * inv * w[c] + b[c];
  }
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[r] = mu_f;
    if (rstd != nullptr) rstd[r] = inv;
  }
}

// dx += rstd * (g - mean(g) - xhat * mean(g . xhat)), g = dy * w.
__global__ void LayerNormBackwardKernel(ConstMatrixView x, const float* w,
                                        const float* mean, const float* rstd,
                                        ConstMatrixView dy, MatrixView dx) {
  const int64_t r = blockIdx.x;
  const int64_t n = x.cols;
  const float mu = mean[r], inv = rstd[r];
  double sum_g = 0, sum_gx = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const double g = double{At(dy, r, c)} * w[c];
    sum_g += g;
    sum_gx += g * (At(x, r, c) - mu) * inv;
  }
  const float mg = static_cast<float>(BlockSum(sum_g) / n);
  const float mgx = static_cast<float>(BlockSum(sum_gx) / n);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float xhat = (At(x, r, c) - mu) * inv;
    At(dx, r, c) += inv * (At(dy, r, c) * w[c] - mg - xhat * mgx);
  }
}

// dw[c] = sum over rows of dy * xhat; db[c] = sum over rows of dy.
struct AffineGradTerm {
  ConstMatrixView x;
  ConstMatrixView dy;
  const float* mean;
  const float* rstd;

  __device__ void operator()(int64_t r, int64_t c, double (&acc)[2]) const {
    const float d = At(dy, r, c);
    acc[0] += double{d} * (At(x, r, c) - mean[r]) * rstd[r];
    acc[1] += d;
  }
};

}  // namespace

void LayerNormForward(CudaContext& ctx, ConstMatrixView x, const float* w,
                      const float* b, float eps, MatrixView y, float* mean,
                      float* rstd) {
  assert(x.rows == y.rows && x.cols == y.cols);
  if (x.rows == 0 || x.cols == 0) return;
  LayerNormForwardKernel<<<x.rows, RowBlockThreads(x.cols), 0, ctx.stream()>>>(
      x, w, b, eps, y, mean, rstd);
  GLM_CUDA_CHECK_LAUNCH();
}

void LayerNormBackward(CudaContext& ctx, ConstMatrixView x, const float* w,
                       const float* mean, const float* rstd, ConstMatrixView dy,
                       MatrixView dx, float* dw, float* db) {
  assert(dy.rows == x.rows && dy.cols == x.cols);
  assert(dx.empty() || (dx.rows == x.rows && dx.cols == x.cols));
  if (x.rows == 0 || x.cols == 0) return;
  if (!dx.empty()) {
    LayerNormBackwardKernel<<<x.rows, RowBlockThreads(x.cols), 0,
                              ctx.stream()>>>(x, w, mean, rstd, dy, dx);
    GLM_CUDA_CHECK_LAUNCH();
  }
  if (dw != nullptr || db != nullptr) {
    void* scratch = ctx.Scratch(ColumnSumsBytes<2>(x.rows, x.cols));
    ColumnSums<2>(AffineGradTerm{x, dy, mean, rstd}, x.rows, x.cols,
                  ColumnOutputs<2>{{dw, db}}, scratch, ctx.stream());
  }
}

}  // namespace glm::cuda
