// The pieces around cuDNN's fused attention (kernels/cuda/cudnn_attention.h):
// the top-k selection as an additive mask and the statistics in cuDNN's
// head-major layout. Every pointer is a device pointer.
#ifndef GLM_KERNELS_CUDA_ATTENTION_MASK_CUH_
#define GLM_KERNELS_CUDA_ATTENTION_MASK_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// What masked scores get: far below any real score, yet finite, so that a
// tile of masked keys never subtracts infinities (its weights vanish as soon
// as the row meets a selected key).
constexpr float kMaskedScore = -1e30f;

// bias [nq, nk] = 0 where query t selected key s (keys [nq, topk], -1 = none),
// kMaskedScore elsewhere; has_key[t] = whether query t selected any key.
void SelectionBias(CudaContext& ctx, const int32_t* keys, int64_t nq,
                   int64_t topk, int64_t nk, __nv_bfloat16* bias,
                   int32_t* has_key);

// Zeroes the rows r of a BF16 out [nq*heads, dv] (cuDNN's output, written
// where it lies) whose token r / heads has no key: their scores were all
// masked.
void ClearRowsWithoutKeys(CudaContext& ctx, const int32_t* has_key,
                          int64_t heads, MatrixView out);

// lse [nq*heads] from cuDNN's stats [heads, nq]; -inf for tokens without keys
// (has_key null: every token has keys).
void StatsToLse(CudaContext& ctx, const float* stats, const int32_t* has_key,
                int64_t nq, int64_t heads, float* lse);

// stats [heads, nq] from lse [nq*heads]; 0 for a row without keys (its
// scores are all masked and its output gradient zeroed, so any finite value
// gives zero gradients).
void LseToStats(CudaContext& ctx, const float* lse, int64_t nq, int64_t heads,
                float* stats);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ATTENTION_MASK_CUH_
