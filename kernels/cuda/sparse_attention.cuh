// Sparse attention (the MLA core over DSA-selected keys) on the GPU: each query
// row attends only to the key tokens its top-k list names. Same semantics as
// kernels/cpu/sparse_attention.cc; every pointer is a device pointer.
#ifndef GLM_KERNELS_CUDA_SPARSE_ATTENTION_CUH_
#define GLM_KERNELS_CUDA_SPARSE_ATTENTION_CUH_

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// Rows are token-major, head-minor: q [nq*heads, dqk], k [nk*heads, dqk], v
// [nk*heads, dv]. keys [nq, topk] (contiguous): key-token indices in [0, nk),
// -1 = none. Writes out [nq*heads, dv] (zeros for a query with no key) and
// probs [nq*heads, topk] (0 on -1 slots). Needs (2*topk + dqk) * 4 bytes of
// shared memory per block, at most 48 KiB.
void SparseAttentionForward(CudaContext& ctx, ConstMatrixView q,
                            ConstMatrixView k, ConstMatrixView v,
                            const int32_t* keys, int64_t topk, int64_t heads,
                            float scale, MatrixView out, MatrixView probs);

// Accumulates (+=) dq [nq*heads, dqk], dk [nk*heads, dqk] and dv [nk*heads,
// dv]; an empty view is not computed. probs as written by the forward. Sums
// over the queries that selected a key run in ascending (query, slot) order,
// without atomics. Takes SparseAttentionBackwardScratchBytes(...) bytes from
// ctx.Scratch in one call (none when only dq is wanted).
void SparseAttentionBackward(CudaContext& ctx, ConstMatrixView q,
                             ConstMatrixView k, ConstMatrixView v,
                             const int32_t* keys, int64_t topk, int64_t heads,
                             float scale, ConstMatrixView probs,
                             ConstMatrixView dout, MatrixView dq, MatrixView dk,
                             MatrixView dv);

// The scratch the backward takes for nq query tokens and nk key tokens:
// nq*heads*topk floats of score gradients when need_dk, plus, when need_dk or
// need_dv, the key -> (query, slot) transpose: 16*nq*topk bytes of sort
// buffers, (nk+1) offsets and CUB's temporary storage.
size_t SparseAttentionBackwardScratchBytes(int64_t nq, int64_t nk, int64_t topk,
                                           int64_t heads, bool need_dk,
                                           bool need_dv);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_SPARSE_ATTENTION_CUH_
