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

// kVec consecutive floats of a row, loaded at once (kVec 4: one 16-byte load,
// which keeps four times the bytes in flight of a float at a time: a row pass
// is bound by loads in flight, one block per 154,880-float row).
template <int kVec>
struct Floats {
  float x[kVec];
};

template <int kVec>
__device__ Floats<kVec> LoadFloats(const float* p) {
  if constexpr (kVec == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    return {{v.x, v.y, v.z, v.w}};
  } else {
    return {{*p}};
  }
}

// bf16 logits (kVec 8: one 16-byte load, kVec 4: one 8-byte load), widened.
template <int kVec>
__device__ Floats<kVec> LoadFloats(const __nv_bfloat16* p) {
  if constexpr (kVec == 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    Floats<8> out;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(
          *reinterpret_cast<const __nv_bfloat162*>(&words[i]));
      out.x[2 * i] = f.x;
      out.x[2 * i + 1] = f.y;
    }
    return out;
  } else if constexpr (kVec == 4) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    const float2 lo =
        __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
    const float2 hi =
        __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
    return {{lo.x, lo.y, hi.x, hi.y}};
  } else {
    return {{__bfloat162float(*p)}};
  }
}

// Adds kVec values to a running log-sum-exp (their max first, so one rescale
// per group); -inf values add nothing.
template <int kVec>
__device__ void AddToMaxSum(const Floats<kVec>& v, MaxSum* part) {
  float max = v.x[0];
#pragma unroll
  for (int i = 1; i < kVec; ++i) max = fmaxf(max, v.x[i]);
  if (max == -INFINITY) return;
  if (max > part->max) {
    part->sum *= expf(part->max - max);
    part->max = max;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) part->sum += expf(v.x[i] - part->max);
}

// max and sum of exp(x - max) over one row, in one pass, kVec values a load
// (kVec 4 or 8 needs cols a multiple of it and a row aligned to a load of
// kVec values); every thread gets the result, summed in an order fixed by the
// shapes.
template <int kVec = 1, typename In = float>
__device__ MaxSum RowMaxSum(const In* __restrict__ row, int64_t cols) {
  using BlockReduce = cub::BlockReduce<MaxSum, kBlockThreads>;
  __shared__ typename BlockReduce::TempStorage reduce_storage;
  __shared__ MaxSum result;
  MaxSum part{-INFINITY, 0.f};
#pragma unroll 4
  for (int64_t c = threadIdx.x * kVec; c < cols; c += kBlockThreads * kVec) {
    AddToMaxSum(LoadFloats<kVec>(row + c), &part);
  }
  const MaxSum total = BlockReduce(reduce_storage).Reduce(part, MergeMaxSum());
  if (threadIdx.x == 0) result = total;
  __syncthreads();
  return result;
}

// Per-row loss in double (0 on rows without a target).
template <int kVec>
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
  const MaxSum lse = RowMaxSum<kVec>(row, cols);
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
// kVec gradients at once (kVec 4: one 16-byte or 8-byte store).
__device__ void StoreGrads(const Floats<1>& g, float* out) { *out = g.x[0]; }
__device__ void StoreGrads(const Floats<1>& g, __nv_bfloat16* out) {
  StoreGrad(g.x[0], out);
}
__device__ void StoreGrads(const Floats<4>& g, float* out) {
  *reinterpret_cast<float4*>(out) = make_float4(g.x[0], g.x[1], g.x[2], g.x[3]);
}
__device__ void StoreGrads(const Floats<4>& g, __nv_bfloat16* out) {
  StoreBf16x4(g.x[0], g.x[1], g.x[2], g.x[3], out);
}
// Eight bf16 gradients: one 16-byte store.
__device__ void StoreGrads(const Floats<8>& g, __nv_bfloat16* out) {
  uint4 v;
  uint32_t* words = &v.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 pair =
        __floats2bfloat162_rn(g.x[2 * i], g.x[2 * i + 1]);
    words[i] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  *reinterpret_cast<uint4*>(out) = v;
}

// The loss of row blockIdx.x into row_loss (as RowLossKernel) and its
// gradient scale * (softmax - onehot) written (not added) to its dlogits row,
// zeros on rows without a target: the values CrossEntropyBackward adds, then
// rounded once to Out. dlogits may be the logits themselves (In = Out):
// each element is read before it is written, by the thread that writes it.
// kVec 4: rows of whole, aligned groups of four (LossAndGrad checks).
template <int kVec, typename In, typename Out>
__global__ void LossAndGradKernel(const In* logits, int64_t stride,
                                  int64_t cols,
                                  const int32_t* __restrict__ targets,
                                  float scale, double* __restrict__ row_loss,
                                  Out* dlogits, int64_t dstride) {
  const int64_t r = blockIdx.x;
  const int32_t target = targets[r];
  const In* row = logits + r * stride;
  Out* d = dlogits + r * dstride;
  if (target < 0) {
    if (threadIdx.x == 0) row_loss[r] = 0;
    for (int64_t c = threadIdx.x * kVec; c < cols; c += kBlockThreads * kVec) {
      StoreGrads(Floats<kVec>{}, d + c);
    }
    return;
  }
  // Read before RowMaxSum's barriers: the loop below may overwrite it.
  const float target_logit = LoadFloats<1>(row + target).x[0];
  const MaxSum lse = RowMaxSum<kVec>(row, cols);
  if (threadIdx.x == 0) {
    row_loss[r] = double{lse.max} + log(double{lse.sum}) - target_logit;
  }
  const float inv_sum = 1.f / lse.sum;
#pragma unroll 4
  for (int64_t c = threadIdx.x * kVec; c < cols; c += kBlockThreads * kVec) {
    Floats<kVec> g = LoadFloats<kVec>(row + c);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      g.x[i] = scale * (expf(g.x[i] - lse.max) * inv_sum);
      if (c + i == target) g.x[i] -= scale;
    }
    StoreGrads(g, d + c);
  }
}

// Whether rows at `data` with `stride` elements of `bytes` each split into
// aligned groups of four: cols and stride multiples of 4, data aligned to
// four elements.
bool FourAligned(const void* data, int64_t stride, int64_t cols, size_t bytes) {
  return cols % 4 == 0 && stride % 4 == 0 && AlignedTo(data, 4 * bytes);
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

template <typename In, typename Out>
void LossAndGrad(CudaContext& ctx, ConstMatrixView logits,
                 const int32_t* targets, float scale, double* loss,
                 Out* dlogits, int64_t dstride) {
  const auto* in = reinterpret_cast<const In*>(logits.data);
  const bool four = FourAligned(in, logits.stride, logits.cols, sizeof(In)) &&
                    FourAligned(dlogits, dstride, logits.cols, sizeof(Out));
  // bf16 both ways: 16-byte loads and stores of eight (the pass is bound by
  // the bytes in flight, one block per row).
  constexpr bool kBf16 = sizeof(In) == 2 && sizeof(Out) == 2;
  const bool eight = kBf16 && four && logits.cols % 8 == 0 &&
                     logits.stride % 8 == 0 && dstride % 8 == 0 &&
                     AlignedTo(in, 16) && AlignedTo(dlogits, 16);
  SumRowLosses(ctx, logits, loss, [&](double* row_loss) {
    if constexpr (kBf16) {
      if (eight) {
        LossAndGradKernel<8><<<logits.rows, kBlockThreads, 0, ctx.stream()>>>(
            in, logits.stride, logits.cols, targets, scale, row_loss, dlogits,
            dstride);
        return;
      }
    }
    if (four) {
      LossAndGradKernel<4><<<logits.rows, kBlockThreads, 0, ctx.stream()>>>(
          in, logits.stride, logits.cols, targets, scale, row_loss, dlogits,
          dstride);
    } else {
      LossAndGradKernel<1><<<logits.rows, kBlockThreads, 0, ctx.stream()>>>(
          in, logits.stride, logits.cols, targets, scale, row_loss, dlogits,
          dstride);
    }
  });
}

}  // namespace

void CrossEntropyLossAndGrad(CudaContext& ctx, ConstMatrixView logits,
                             const int32_t* targets, float scale, double* loss,
                             MatrixView dlogits) {
  assert(dlogits.rows == logits.rows && dlogits.cols == logits.cols);
  assert(logits.dtype == ElementType::kF32);
  LossAndGrad<float>(ctx, logits, targets, scale, loss, dlogits.data,
                     dlogits.stride);
}

void CrossEntropyLossAndGrad(CudaContext& ctx, ConstMatrixView logits,
                             const int32_t* targets, float scale, double* loss,
                             __nv_bfloat16* dlogits, int64_t ld) {
  assert(ld >= logits.cols);
  if (logits.dtype == ElementType::kBF16) {
    LossAndGrad<__nv_bfloat16>(ctx, logits, targets, scale, loss, dlogits, ld);
  } else {
    LossAndGrad<float>(ctx, logits, targets, scale, loss, dlogits, ld);
  }
}

void CrossEntropyForward(CudaContext& ctx, ConstMatrixView logits,
                         const int32_t* targets, double* loss) {
  const bool four =
      FourAligned(logits.data, logits.stride, logits.cols, sizeof(float));
  SumRowLosses(ctx, logits, loss, [&](double* row_loss) {
    if (four) {
      RowLossKernel<4><<<logits.rows, kBlockThreads, 0, ctx.stream()>>>(
          logits.data, logits.stride, logits.cols, targets, row_loss);
    } else {
      RowLossKernel<1><<<logits.rows, kBlockThreads, 0, ctx.stream()>>>(
          logits.data, logits.stride, logits.cols, targets, row_loss);
    }
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
