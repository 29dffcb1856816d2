// The attention each key receives, summed over heads, on the tensor cores:
// sums[t, s] = sum_h exp(scale q[t*heads+h] . k[s*heads+h] - lse[t*heads+h]),
// each dot a bf16 product summed in fp32 (as the bf16 GEMM that formed the
// heads' scores before), the heads added in order in registers. The
// [heads, queries, keys] scores (a GB per 4k layer in fp32) are never
// stored: only the [queries, keys] sums, which the indexer's KL target
// gathers at the selected keys (SparseAttentionKeyWeights).
#ifndef GLM_KERNELS_CUDA_ATTENTION_KEY_SUMS_CUH_
#define GLM_KERNELS_CUDA_ATTENTION_KEY_SUMS_CUH_

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

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ATTENTION_KEY_SUMS_CUH_
