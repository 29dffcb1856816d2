#include <cuda_bf16.h>

#include <cassert>
#include <cmath>
#include <cub/block/block_reduce.cuh>

#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"

namespace glm::cuda {
namespace {

// A running log-sum-exp: sum of exp(x - max) over the values seen so far.
struct MaxSum {
  float max;
  float sum;
};

// The merge of two partial log-sum-exps; an all -inf part adds nothing (and
// never computes exp(-inf - -inf)).
struct MergeMaxSum {
  __device__ MaxSum operator()(const MaxSum& a, const MaxSum& b) const {
    const float max = fmaxf(a.max, b.max);
    if (max == -INFINITY) return {max, 0.f};
    return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
  }
};

// max and sum of exp(x - max) over one row, in one pass; every thread gets
// the result.
__device__ MaxSum RowMaxSum(const float* __restrict__ row, int64_t cols) {
  using BlockReduce = cub::BlockReduce<MaxSum, kBlockThreads>;
  __shared__ typename BlockReduce::TempStorage reduce_storage;
  __shared__ MaxSum result;
  MaxSum part{-INFINITY, 0.f};
  for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) {
    const float x = row[c];
    if (x > part.max) {
      part.sum = part.sum * expf(part.max - x) + 1.f;
      part.max = x;
    } else if (x > -INFINITY) {
      part.sum += expf(x - part.max);
    }
  }
  const MaxSum total = BlockReduce(reduce_storage).Reduce(part, MergeMaxSum());
  if (threadIdx.x == 0) result = total;
  __syncthreads();
  return result;
}

// Per-row loss in double (0 on rows without a target).
__global__ void RowLossKernel(const float* __restrict__ logits, int64_t stride,
                              int64_t cols, const int32_t* __restrict__ targets,
                              double* __restrict__ row_loss) {
  const int64_t r = blockIdx.x;
  const int32_t target = targets[r];
  if (target < 0) {
    if (threadIdx.x == 0) row_loss[r] = 0;
    return;
  }
  const float* row = logits + r * stride;
  const MaxSum lse = RowMaxSum(row, cols);
  if (threadIdx.x == 0) {
    row_loss[r] = double{lse.max} + log(double{lse.sum}) - row[target];
  }
}

// One block sums the row losses: each thread a fixed strided subset, then a
// fixed-shape tree, so the total does not depend on scheduling.
__global__ void SumKernel(const double* __restrict__ values, int64_t n,
                          double* __restrict__ total) {
  double part = 0;
  for (int64_t i = threadIdx.x; i < n; i += kBlockThreads) part += values[i];
  const double sum = BlockSum(part);
  if (threadIdx.x == 0) *total = sum;
}

__global__ void CrossEntropyBackwardKernel(const float* __restrict__ logits,
                                           int64_t stride, int64_t cols,
                                           const int32_t* __restrict__ targets,
                                           float scale,
                                           float* __restrict__ dlogits,
                                           int64_t dstride) {
  const int64_t r = blockIdx.x;
  const int32_t target = targets[r];
  if (target < 0) return;
  const float* row = logits + r * stride;
  const MaxSum lse = RowMaxSum(row, cols);
  const float inv_sum = 1.f / lse.sum;
  float* d = dlogits + r * dstride;
  for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) {
    float g = d[c] + scale * (expf(row[c] - lse.max) * inv_sum);
    if (c == target) g -= scale;
    d[c] = g;
  }
}

__device__ void StoreGrad(float g, float* out) { *out = g; }
__device__ void StoreGrad(float g, __nv_bfloat16* out) {
  *out = __float2bfloat16_rn(g);
}

// The loss of row blockIdx.x into row_loss (as RowLossKernel) and its
// gradient scale * (softmax - onehot) written (not added) to its dlogits row,
// zeros on rows without a target: the values CrossEntropyBackward adds, then
// rounded once to Out. dlogits may be the logits themselves (Out float):
// each element is read before it is written, by the thread that writes it.
template <typename Out>
__global__ void LossAndGradKernel(const float* logits, int64_t stride,
                                  int64_t cols,
                                  const int32_t* __restrict__ targets,
                                  float scale, double* __restrict__ row_loss,
                                  Out* dlogits, int64_t dstride) {
  const int64_t r = blockIdx.x;
  const int32_t target = targets[r];
  const float* row = logits + r * stride;
  Out* d = dlogits + r * dstride;
  if (target < 0) {
    if (threadIdx.x == 0) row_loss[r] = 0;
    for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) {
      StoreGrad(0.f, d + c);
    }
    return;
  }
  // Read before RowMaxSum's barriers: the loop below may overwrite it.
  const float target_logit = row[target];
  const MaxSum lse = RowMaxSum(row, cols);
  if (threadIdx.x == 0) {
    row_loss[r] = double{lse.max} + log(double{lse.sum}) - target_logit;
  }
  const float inv_sum = 1.f / lse.sum;
  for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) {
    float g = scale * (expf(row[c] - lse.max) * inv_sum);
    if (c == target) g -= scale;
    StoreGrad(g, d + c);
  }
}

// *loss = the sum of the per-row losses that launch(row_loss) writes into
// row_loss[0, logits.rows) (one double per row of scratch); 0 without rows.
template <typename LaunchRows>
void SumRowLosses(CudaContext& ctx, ConstMatrixView logits, double* loss,
                  LaunchRows launch) {
  assert(logits.cols > 0);
  if (logits.rows == 0) {
    GLM_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(double), ctx.stream()));
    return;
  }
  auto* row_loss =
      static_cast<double*>(ctx.Scratch(logits.rows * sizeof(double)));
  launch(row_loss);
  GLM_CUDA_CHECK_LAUNCH();
  SumKernel<<<1, kBlockThreads, 0, ctx.stream()>>>(row_loss, logits.rows, loss);
  GLM_CUDA_CHECK_LAUNCH();
}

template <typename Out>
void LossAndGrad(CudaContext& ctx, ConstMatrixView logits,
                 const int32_t* targets, float scale, double* loss,
                 Out* dlogits, int64_t dstride) {
  SumRowLosses(ctx, logits, loss, [&](double* row_loss) {
    LossAndGradKernel<<<logits.rows, kBlockThreads, 0, ctx.stream()>>>(
        logits.data, logits.stride, logits.cols, targets, scale, row_loss,
        dlogits, dstride);
  });
}

}  // namespace

void CrossEntropyLossAndGrad(CudaContext& ctx, ConstMatrixView logits,
                             const int32_t* targets, float scale, double* loss,
                             MatrixView dlogits) {
  assert(dlogits.rows == logits.rows && dlogits.cols == logits.cols);
  LossAndGrad(ctx, logits, targets, scale, loss, dlogits.data, dlogits.stride);
}

void CrossEntropyLossAndGrad(CudaContext& ctx, ConstMatrixView logits,
                             const int32_t* targets, float scale, double* loss,
                             __nv_bfloat16* dlogits, int64_t ld) {
  assert(ld >= logits.cols);
  LossAndGrad(ctx, logits, targets, scale, loss, dlogits, ld);
}

void CrossEntropyForward(CudaContext& ctx, ConstMatrixView logits,
                         const int32_t* targets, double* loss) {
  SumRowLosses(ctx, logits, loss, [&](double* row_loss) {
    RowLossKernel<<<logits.rows, kBlockThreads, 0, ctx.stream()>>>(
        logits.data, logits.stride, logits.cols, targets, row_loss);
  });
}

void CrossEntropyBackward(CudaContext& ctx, ConstMatrixView logits,
                          const int32_t* targets, float scale,
                          MatrixView dlogits) {
  assert(logits.cols > 0);
  assert(dlogits.rows == logits.rows && dlogits.cols == logits.cols);
  if (logits.rows == 0) return;
  CrossEntropyBackwardKernel<<<logits.rows, kBlockThreads, 0, ctx.stream()>>>(
      logits.data, logits.stride, logits.cols, targets, scale, dlogits.data,
      dlogits.stride);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
