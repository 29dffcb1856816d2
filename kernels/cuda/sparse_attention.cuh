// Sparse attention (the MLA core over DSA-selected keys) on the GPU: each query
// row attends only to the key tokens its top-k list names. Same semantics as
// kernels/cpu/sparse_attention.cc; every pointer is a device pointer.
#ifndef GLM_KERNELS_CUDA_SPARSE_ATTENTION_CUH_
#define GLM_KERNELS_CUDA_SPARSE_ATTENTION_CUH_

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// Rows are token-major, head-minor: q [nq*heads, dqk], k [nk*heads, dqk], v
// [nk*heads, dv]. keys [nq, topk] (contiguous): distinct key-token indices in
// [0, nk) per query, -1 = none. Writes out [nq*heads, dv] (zeros for a query
// with no key) and lse [nq*heads] (-inf for it).
//
// Two algorithms, chosen per call: when each query selects at least one in 8
// of the nk keys (DSA's top-2048 at up to 16k tokens), tiles of 32 queries x
// 32 keys of one head, so a key's row is read once per tile of queries
// (kernels/cuda/attention_tiles.cuh); otherwise one block per query row
// gathering its keys' rows. Both take their scratch from ctx.Scratch in one
// call. fp32 arithmetic in either precision (the bf16 mode's fast path is
// kernels/cuda/cudnn_attention.h).
void SparseAttentionForward(CudaContext& ctx, ConstMatrixView q,
                            ConstMatrixView k, ConstMatrixView v,
                            const int32_t* keys, int64_t topk, int64_t heads,
                            float scale, MatrixView out, float* lse);

// Accumulates (+=) dq [nq*heads, dqk], dk [nk*heads, dqk] and dv [nk*heads,
// dv] (the backend zeroes them first: its op writes them); an empty view is
// not computed. The probabilities are recomputed into
// scratch by the forward's kernels (bitwise those the forward used). Sums over
// the queries that selected a key run in ascending query order, without
// atomics.
void SparseAttentionBackward(CudaContext& ctx, ConstMatrixView q,
                             ConstMatrixView k, ConstMatrixView v,
                             const int32_t* keys, int64_t topk, int64_t heads,
                             float scale, ConstMatrixView dout, MatrixView dq,
                             MatrixView dk, MatrixView dv);

// weights [nq, topk] = sum over heads of exp(scale q . k - lse) per selected
// key (Backend::SparseAttentionKeyWeights). Dense selections: per block of
// queries, one batched GEMM over the heads (in the context's precision) and a
// gather of the selected scores; sparse ones: the forward's gather kernel.
// q and k F32 or BF16 (the activation type); the other ops here read F32.
void SparseAttentionKeyWeights(CudaContext& ctx, ConstMatrixView q,
                               ConstMatrixView k, const int32_t* keys,
                               int64_t topk, int64_t heads, float scale,
                               const float* lse, MatrixView weights);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_SPARSE_ATTENTION_CUH_
