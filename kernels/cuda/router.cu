#include <cassert>
#include <climits>
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/router.cuh"

namespace glm::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;
// Experts a lane holds: lane + 32 * slot.
constexpr int kSlots = kRouterMaxExperts / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

// The CPU's TopIndices order: larger value first, ties to the lower index.
__device__ bool Precedes(float value, int index, float other_value,
                         int other_index) {
  return value > other_value || (value == other_value && index < other_index);
}

// The two largest values seen (counting repeats), first >= second.
struct Top2 {
  float first;
  float second;
};

__device__ Top2 Push(Top2 t, float value) {
  if (value > t.first) return {value, t.first};
  if (value > t.second) return {t.first, value};
  return t;
}

// Across the warp; the result is a multiset property, so the merge order
// does not change it.
__device__ Top2 WarpTop2(Top2 t) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const Top2 o{__shfl_xor_sync(kFullMask, t.first, offset),
                 __shfl_xor_sync(kFullMask, t.second, offset)};
    t = t.first >= o.first ? Top2{t.first, fmaxf(t.second, o.first)}
                           : Top2{o.first, fmaxf(t.first, o.second)};
  }
  return t;
}

// Group score = sum of its two best choices (its only one when groups have
// one expert); keeps the spec.topk_group best groups (ties to the lower
// group) and sets every other expert's choice to -inf.
__device__ void KeepBestGroups(float (&choice)[kSlots], int experts,
                               const RouterSpec& spec, int lane) {
  const int per_group = experts / spec.n_group;
  float group_score[kRouterMaxGroups];
#pragma unroll
  for (int g = 0; g < kRouterMaxGroups; ++g) {
    if (g >= spec.n_group) break;
    Top2 t{-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int e = lane + kWarpSize * j;
      if (e < experts && e / per_group == g) t = Push(t, choice[j]);
    }
    t = WarpTop2(t);
    group_score[g] = per_group >= 2 ? t.first + t.second : t.first;
  }
  unsigned kept = 0;
  for (int i = 0; i < spec.topk_group; ++i) {
    int best = -1;
    float best_score = -INFINITY;
#pragma unroll
    for (int g = 0; g < kRouterMaxGroups; ++g) {
      if (g < spec.n_group && !(kept >> g & 1u) &&
          (best < 0 || group_score[g] > best_score)) {
        best = g;
        best_score = group_score[g];
      }
    }
    kept |= 1u << best;
  }
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const int e = lane + kWarpSize * j;
    if (e < experts && !(kept >> (e / per_group) & 1u)) choice[j] = -INFINITY;
  }
}

// One warp per token. Lane l holds experts l, l + 32, ...; each of the top_k
// rounds takes the warp-wide first expert in TopIndices order not yet taken.
__global__ void RouterForwardKernel(
    const float* __restrict__ logits, int64_t logits_stride,
    const float* __restrict__ bias, int64_t tokens, int experts,
    RouterSpec spec, float* __restrict__ scores, int64_t scores_stride,
    float* __restrict__ weights, int64_t weights_stride,
    int32_t* __restrict__ indices) {
  const int64_t r =
      int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (r >= tokens) return;
  const int lane = threadIdx.x % kWarpSize;
  float score[kSlots];
  float choice[kSlots];
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const int e = lane + kWarpSize * j;
    if (e >= experts) break;
    // exp in double, rounded once: the CPU's correctly rounded expf, so that
    // near-ties between experts break the same way.
    const double x = logits[r * logits_stride + e];
    score[j] = 1.f / (1.f + static_cast<float>(exp(-x)));
    scores[r * scores_stride + e] = score[j];
    choice[j] = score[j] + bias[e];
  }
  if (spec.n_group > 1) KeepBestGroups(choice, experts, spec, lane);

  unsigned taken = 0;
  int chosen[kRouterMaxTopK];
  float chosen_score[kRouterMaxTopK];
#pragma unroll
  for (int i = 0; i < kRouterMaxTopK; ++i) {
    if (i >= spec.top_k) break;
    float best = -INFINITY;
    int best_e = INT_MAX;
    float best_score = 0.f;
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int e = lane + kWarpSize * j;
      if (e < experts && !(taken >> j & 1u) &&
          Precedes(choice[j], e, best, best_e)) {
        best = choice[j];
        best_e = e;
        best_score = score[j];
      }
    }
    // best_score stays lane-local: the winner's own lane holds its score.
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const float o = __shfl_xor_sync(kFullMask, best, offset);
      const int o_e = __shfl_xor_sync(kFullMask, best_e, offset);
      if (Precedes(o, o_e, best, best_e)) {
        best = o;
        best_e = o_e;
      }
    }
    const int owner = best_e % kWarpSize;
    chosen[i] = best_e;
    chosen_score[i] = __shfl_sync(kFullMask, best_score, owner);
    if (lane == owner) taken |= 1u << (best_e / kWarpSize);
  }

  double sum = 0;
#pragma unroll
  for (int i = 0; i < kRouterMaxTopK; ++i) {
    if (i < spec.top_k) sum += chosen_score[i];
  }
  const float denom =
      spec.norm_topk_prob ? static_cast<float>(sum) + 1e-20f : 1.f;
#pragma unroll
  for (int i = 0; i < kRouterMaxTopK; ++i) {
    if (i < spec.top_k && lane == i) {
      indices[r * spec.top_k + i] = chosen[i];
      weights[r * weights_stride + i] =
          chosen_score[i] / denom * spec.routed_scaling_factor;
    }
  }
}

// One thread per token, in double as the CPU: w_i = c * s_i / S with
// S = sum_j s_j (+ 1e-20) gives ds_i = c (dw_i / S - sum_j dw_j s_j / S^2),
// then through the sigmoid.
__global__ void RouterBackwardKernel(
    const float* __restrict__ scores, int64_t scores_stride,
    const int32_t* __restrict__ indices, const float* __restrict__ dweights,
    int64_t dweights_stride, int64_t tokens, RouterSpec spec,
    float* __restrict__ dlogits, int64_t dlogits_stride) {
  const int64_t r = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (r >= tokens) return;
  const int32_t* chosen = indices + r * spec.top_k;
  const float* s = scores + r * scores_stride;
  const float* dw = dweights + r * dweights_stride;
  double sum = 0, dot = 0;
  for (int i = 0; i < spec.top_k; ++i) {
    sum += s[chosen[i]];
    dot += double{dw[i]} * s[chosen[i]];
  }
  for (int i = 0; i < spec.top_k; ++i) {
    const int e = chosen[i];
    double ds = dw[i];
    if (spec.norm_topk_prob) {
      const double denom = sum + 1e-20;
      ds = dw[i] / denom - dot / (denom * denom);
    }
    ds *= spec.routed_scaling_factor;
    dlogits[r * dlogits_stride + e] +=
        static_cast<float>(ds * s[e] * (1.0 - s[e]));
  }
}

}  // namespace

void RouterForward(CudaContext& ctx, ConstMatrixView logits, const float* bias,
                   const RouterSpec& spec, MatrixView scores,
                   MatrixView weights, int32_t* indices) {
  const int64_t experts = logits.cols;
  assert(experts > 0 && experts <= kRouterMaxExperts);
  assert(spec.n_group >= 1 && spec.n_group <= kRouterMaxGroups &&
         experts % spec.n_group == 0);
  assert(spec.topk_group >= 1 && spec.topk_group <= spec.n_group);
  assert(spec.top_k >= 1 && spec.top_k <= kRouterMaxTopK &&
         spec.top_k <= experts);
  assert(scores.rows == logits.rows && scores.cols == experts);
  assert(weights.rows == logits.rows && weights.cols == spec.top_k);
  if (logits.rows == 0) return;
  const int64_t blocks = (logits.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  RouterForwardKernel<<<blocks, kWarpsPerBlock * kWarpSize, 0, ctx.stream()>>>(
      logits.data, logits.stride, bias, logits.rows, static_cast<int>(experts),
      spec, scores.data, scores.stride, weights.data, weights.stride, indices);
  GLM_CUDA_CHECK_LAUNCH();
}

void RouterBackward(CudaContext& ctx, ConstMatrixView scores,
                    const int32_t* indices, ConstMatrixView dweights,
                    const RouterSpec& spec, MatrixView dlogits) {
  assert(dweights.rows == scores.rows && dweights.cols == spec.top_k);
  assert(dlogits.rows == scores.rows && dlogits.cols == scores.cols);
  if (scores.rows == 0) return;
  constexpr int kThreads = 128;
  RouterBackwardKernel<<<(scores.rows + kThreads - 1) / kThreads, kThreads, 0,
                         ctx.stream()>>>(
      scores.data, scores.stride, indices, dweights.data, dweights.stride,
      scores.rows, spec, dlogits.data, dlogits.stride);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
