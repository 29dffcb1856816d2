#include <algorithm>
#include <cassert>
#include <cmath>

#include "kernels/cuda/attention_mask.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"

namespace glm::cuda {
namespace {

// Keys per segment of a row built in shared memory (16 KiB of bf16).
constexpr int kBiasSegment = 8192;

// One block per query t. Its row is built a segment at a time in shared
// memory (all masked, then the selected keys opened) and written out in
// 16-byte stores when the rows are aligned to them: scattered 2-byte writes
// to global memory ran at a fifth of the copy rate.
__global__ void SelectionBiasKernel(const int32_t* keys, int64_t topk,
                                    int64_t nk, __nv_bfloat16* bias,
                                    int32_t* has_key) {
  __shared__ __align__(16) __nv_bfloat16 segment[kBiasSegment];
  const int64_t t = blockIdx.x;
  const int32_t* selected = keys + t * topk;
  __nv_bfloat16* row = bias + t * nk;
  const bool vector = nk % 8 == 0 && AlignedTo(bias, 16);
  const __nv_bfloat16 masked = __float2bfloat16(kMaskedScore);
  int any = 0;
  for (int64_t s0 = 0; s0 < nk; s0 += kBiasSegment) {
    const int width =
        static_cast<int>(std::min<int64_t>(kBiasSegment, nk - s0));
    for (int s = threadIdx.x; s < width; s += blockDim.x) segment[s] = masked;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < topk; j += blockDim.x) {
      const int64_t s = selected[j] - s0;
      if (selected[j] < 0) continue;
      any = 1;
      if (s >= 0 && s < width) segment[s] = __float2bfloat16(0.f);
    }
    __syncthreads();
    if (vector) {
      const auto* from = reinterpret_cast<const uint4*>(segment);
      auto* to = reinterpret_cast<uint4*>(row + s0);
      for (int i = threadIdx.x; i < width / 8; i += blockDim.x) to[i] = from[i];
    } else {
      for (int s = threadIdx.x; s < width; s += blockDim.x) {
        row[s0 + s] = segment[s];
      }
    }
    __syncthreads();  // the next segment reuses the shared row
  }
  any = __syncthreads_or(any);
  if (threadIdx.x == 0) has_key[t] = any;
}

__global__ void StatsToLseKernel(const float* stats, const int32_t* has_key,
                                 int64_t nq, int64_t heads, float* lse) {
  ForEachElement(nq, heads, [&](int64_t t, int64_t h) {
    const bool any = has_key == nullptr || has_key[t] != 0;
    lse[t * heads + h] = any ? stats[h * nq + t] : -INFINITY;
  });
}

__global__ void LseToStatsKernel(const float* lse, int64_t nq, int64_t heads,
                                 float* stats) {
  ForEachElement(nq, heads, [&](int64_t t, int64_t h) {
    const float value = lse[t * heads + h];
    stats[h * nq + t] = isinf(value) ? 0.f : value;
  });
}

__global__ void ClearRowsWithoutKeysKernel(const int32_t* has_key,
                                           int64_t heads, MatrixView out) {
  ForEachElement(out.rows, 1, [&](int64_t r, int64_t) {
    if (has_key[r / heads] != 0) return;
    for (int64_t c = 0; c < out.cols; ++c) Bf16At(out, r, c) = 0.f;
  });
}

}  // namespace

void ClearRowsWithoutKeys(CudaContext& ctx, const int32_t* has_key,
                          int64_t heads, MatrixView out) {
  assert(out.dtype == ElementType::kBF16);
  if (out.rows == 0) return;
  ClearRowsWithoutKeysKernel<<<GridStrideBlocks(out.rows), kBlockThreads, 0,
                               ctx.stream()>>>(has_key, heads, out);
  GLM_CUDA_CHECK_LAUNCH();
}

void SelectionBias(CudaContext& ctx, const int32_t* keys, int64_t nq,
                   int64_t topk, int64_t nk, __nv_bfloat16* bias,
                   int32_t* has_key) {
  if (nq == 0) return;
  SelectionBiasKernel<<<nq, kBlockThreads, 0, ctx.stream()>>>(keys, topk, nk,
                                                              bias, has_key);
  GLM_CUDA_CHECK_LAUNCH();
}

void StatsToLse(CudaContext& ctx, const float* stats, const int32_t* has_key,
                int64_t nq, int64_t heads, float* lse) {
  StatsToLseKernel<<<GridStrideBlocks(nq * heads), kBlockThreads, 0,
                     ctx.stream()>>>(stats, has_key, nq, heads, lse);
  GLM_CUDA_CHECK_LAUNCH();
}

void LseToStats(CudaContext& ctx, const float* lse, int64_t nq, int64_t heads,
                float* stats) {
  LseToStatsKernel<<<GridStrideBlocks(nq * heads), kBlockThreads, 0,
                     ctx.stream()>>>(lse, nq, heads, stats);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
