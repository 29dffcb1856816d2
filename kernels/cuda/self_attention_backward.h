// The bf16 mode's self-attention backward over a DSA selection through the
// batched products of kernels/cuda/attention_products.cuh instead of cuDNN's
// masked backward (whose kernel reads the selection's bias per tile at about
// 0.6x its causal rate at glm5.2-mini's 256-wide heads). The queries run in
// four blocks, each against the keys up to its last query, causal and
// selected through the one bias; the last block writes dk and dv, the
// others add into the keys they see.
#ifndef GLM_KERNELS_CUDA_SELF_ATTENTION_BACKWARD_H_
#define GLM_KERNELS_CUDA_SELF_ATTENTION_BACKWARD_H_

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// Backend::SparseAttentionBackward's semantics (dq, dk, dv written). Runs
// and returns true where the products apply: self-attention (q and k of as
// many tokens), every operand and wanted gradient BF16 (q, k, out and dout
// dense rows) with extents the products take, the selection's bias
// ([tokens, tokens] bf16) within max_scratch_bytes; else returns false
// having done nothing. The blocks are made small enough for their P and dS
// to fit max_scratch_bytes too.
bool SelfAttentionProductsBackward(
    CudaContext& ctx, ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
    const int32_t* keys, int64_t topk, int64_t heads, float scale,
    ConstMatrixView out, const float* lse, ConstMatrixView dout, MatrixView dq,
    MatrixView dk, MatrixView dv, int64_t max_scratch_bytes);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_SELF_ATTENTION_BACKWARD_H_
