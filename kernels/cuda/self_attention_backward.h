// The bf16 mode's self-attention backward over a DSA selection through the
// batched products of kernels/cuda/attention_products.cuh instead of cuDNN's
// masked backward (whose kernel reads the selection's bias per tile at about
// 0.6x its causal rate at glm5.2-mini's 256-wide heads). P and dS are kept
// for every head and pair ([heads, tokens, tokens] in bf16, the causal
// tiles written): one launch a product, each over the causal tiles alone
// (kernels/cuda/causal_tile_scheduler.cuh), dk and dv written once.
#ifndef GLM_KERNELS_CUDA_SELF_ATTENTION_BACKWARD_H_
#define GLM_KERNELS_CUDA_SELF_ATTENTION_BACKWARD_H_

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// Backend::SparseAttentionBackward's semantics (dq, dk, dv written; the key
// weights, when wanted, summed from P as the products rounded it). Runs and
// returns true where the products apply: self-attention (q and k of as many
// tokens), every operand and wanted gradient BF16 (q, k, out and dout dense
// rows) with extents the products take, the bias, P and dS within
// max_scratch_bytes (4 bytes a pair and head, and 2 a pair); else returns
// false having done nothing.
bool SelfAttentionProductsBackward(
    CudaContext& ctx, ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
    const int32_t* keys, int64_t topk, int64_t heads, float scale,
    ConstMatrixView out, const float* lse, ConstMatrixView dout, MatrixView dq,
    MatrixView dk, MatrixView dv, MatrixView key_weights,
    int64_t max_scratch_bytes);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_SELF_ATTENTION_BACKWARD_H_
