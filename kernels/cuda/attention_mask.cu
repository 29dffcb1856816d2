#include <cmath>

#include "kernels/cuda/attention_mask.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"

namespace glm::cuda {
namespace {

// One block per query: the whole row masked, then its keys opened.
__global__ void SelectionBiasKernel(const int32_t* keys, int64_t topk,
                                    int64_t nk, __nv_bfloat16* bias,
                                    int32_t* has_key) {
  const int64_t t = blockIdx.x;
  __nv_bfloat16* row = bias + t * nk;
  const __nv_bfloat16 masked = __float2bfloat16(kMaskedScore);
  for (int64_t s = threadIdx.x; s < nk; s += blockDim.x) row[s] = masked;
  __syncthreads();
  int any = 0;
  for (int64_t j = threadIdx.x; j < topk; j += blockDim.x) {
    const int32_t key = keys[t * topk + j];
    if (key < 0) continue;
    row[key] = __float2bfloat16(0.f);
    any = 1;
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

}  // namespace

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
