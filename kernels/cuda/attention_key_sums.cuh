// The attention each key receives, summed over heads, on the tensor cores:
// sums[t, s] = sum_h exp(scale q[t*heads+h] . k[s*heads+h] - lse[t*heads+h]),
// each dot a bf16 product summed in fp32 (as the bf16 GEMM that formed the
// heads' scores before), the heads added in order in registers. The
// [heads, queries, keys] scores (a GB per 4k layer in fp32) are never
// stored: only the [queries, keys] sums, which the indexer's KL target
// gathers at the selected keys (SparseAttentionKeyWeights).
#ifndef GLM_KERNELS_CUDA_ATTENTION_KEY_SUMS_CUH_
#define GLM_KERNELS_CUDA_ATTENTION_KEY_SUMS_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// Whether AttentionKeySums takes these operands: q and k bf16 with 16-byte
// aligned rows of the same width, a multiple of 8 up to 256, interleaved by
// heads (q's rows t * heads + h, k's s * heads + h).
bool AttentionKeySumsSupported(ConstMatrixView q, ConstMatrixView k,
                               int64_t heads);

// For queries t0 <= t < t0 + count and keys s < key_end: sums[(t - t0) * ld
// + s]. With causal (self-attention: query t is key token t) the entries of
// keys s > t are left unwritten. lse [nq * heads] (natural log, the scale
// inside). Sums run in an order fixed by the shapes: deterministic.
void AttentionKeySums(CudaContext& ctx, ConstMatrixView q, ConstMatrixView k,
                      int64_t heads, float scale, const float* lse, int64_t t0,
                      int64_t count, int64_t key_end, bool causal, float* sums,
                      int64_t ld);

// The same sums where the probabilities are at hand, gathered at the
// selected keys: weights[t, j] = sum_h probs[(h * tokens + t) * tokens +
// keys[t * topk + j]] (0 on -1 slots), the heads added in order in fp32.
// probs: the attention products' P ([heads, tokens, tokens] bf16 of
// self-attention, written at every selected pair: attention_products.cuh);
// weights [tokens, topk] F32.
void ProbabilityKeySums(CudaContext& ctx, const __nv_bfloat16* probs,
                        int64_t tokens, int64_t heads, const int32_t* keys,
                        MatrixView weights);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ATTENTION_KEY_SUMS_CUH_
