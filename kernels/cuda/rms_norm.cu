#include "kernels/cuda/rms_norm.cuh"

#include <cassert>

#include "kernels/cuda/cuda_check.h"

namespace glm::cuda {
namespace {

constexpr int kThreads = 256;

// Block-wide sum; every thread gets the total.
__device__ float BlockSum(float value) {
  __shared__ float partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffff, value, offset);
  }
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  __syncthreads();
  return total;
}

__global__ void RmsNormForwardKernel(const float* __restrict__ x,
                                     const float* __restrict__ weight,
                                     float* __restrict__ y,
                                     float* __restrict__ rstd, int64_t dim,
                                     float eps) {
  const float* row = x + blockIdx.x * dim;
  float sum_sq = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) sum_sq += row[i] * row[i];
  const float r = rsqrtf(BlockSum(sum_sq) / dim + eps);
  float* out = y + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    out[i] = weight[i] * (row[i] * r);
  }
  if (rstd != nullptr && threadIdx.x == 0) rstd[blockIdx.x] = r;
}

// dx = r * (w*dy - x * r^2 * mean(w*dy*x)); dweight[i] += sum_rows dy*x*r.
__global__ void RmsNormBackwardKernel(const float* __restrict__ dy,
                                      const float* __restrict__ x,
                                      const float* __restrict__ weight,
                                      const float* __restrict__ rstd,
                                      float* __restrict__ dx, int64_t dim) {
  const float* g = dy + blockIdx.x * dim;
  const float* row = x + blockIdx.x * dim;
  const float r = rstd[blockIdx.x];
  float dot = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    dot += weight[i] * g[i] * row[i];
  }
  const float mean_dot = BlockSum(dot) / dim;
  float* out = dx + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    out[i] = r * (weight[i] * g[i] - row[i] * r * r * mean_dot);
  }
}

// One thread per column walks the rows in order: deterministic, no atomics.
__global__ void RmsNormWeightGradKernel(const float* __restrict__ dy,
                                        const float* __restrict__ x,
                                        const float* __restrict__ rstd,
                                        float* __restrict__ dweight,
                                        int64_t rows, int64_t dim) {
  const int64_t col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= dim) return;
  float sum = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    sum += dy[r * dim + col] * x[r * dim + col] * rstd[r];
  }
  dweight[col] += sum;
}

}  // namespace

void RmsNormForward(const float* x, const float* weight, float* y, float* rstd,
                    int64_t rows, int64_t dim, float eps, cudaStream_t stream) {
  assert(rows > 0 && dim > 0);
  RmsNormForwardKernel<<<rows, kThreads, 0, stream>>>(x, weight, y, rstd, dim,
                                                      eps);
  GLM_CUDA_CHECK_LAUNCH();
}

void RmsNormBackward(const float* dy, const float* x, const float* weight,
                     const float* rstd, float* dx, float* dweight, int64_t rows,
                     int64_t dim, cudaStream_t stream) {
  assert(rows > 0 && dim > 0);
  RmsNormBackwardKernel<<<rows, kThreads, 0, stream>>>(dy, x, weight, rstd, dx,
                                                       dim);
  GLM_CUDA_CHECK_LAUNCH();
  const int64_t blocks = (dim + kThreads - 1) / kThreads;
  RmsNormWeightGradKernel<<<blocks, kThreads, 0, stream>>>(dy, x, rstd, dweight,
                                                           rows, dim);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
