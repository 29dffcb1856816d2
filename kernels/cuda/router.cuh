// MoE routing on the GPU (DeepSeek-V3 noaux_tc): sigmoid scores, a
// selection-only bias, group-limited top-k. Same semantics as
// kernels/cpu/router.h, ties to the lower index; every pointer is a device
// pointer.
#ifndef GLM_KERNELS_CUDA_ROUTER_CUH_
#define GLM_KERNELS_CUDA_ROUTER_CUH_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// Limits of the one-warp-per-token kernel.
inline constexpr int kRouterMaxExperts = 256;
inline constexpr int kRouterMaxTopK = 8;
inline constexpr int kRouterMaxGroups = 8;

// logits, scores: [tokens, experts]; bias: [experts]; weights: [tokens,
// top_k]; indices: [tokens * top_k], contiguous. Writes scores, weights and
// indices.
void RouterForward(CudaContext& ctx, ConstMatrixView logits, const float* bias,
                   const RouterSpec& spec, MatrixView scores,
                   MatrixView weights, int32_t* indices);

// dlogits += d(weights)/d(logits)^T dweights, through the chosen experts only.
void RouterBackward(CudaContext& ctx, ConstMatrixView scores,
                    const int32_t* indices, ConstMatrixView dweights,
                    const RouterSpec& spec, MatrixView dlogits);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ROUTER_CUH_
