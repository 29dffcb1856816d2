// MLA's attention in its latent space over DSA-selected keys, on the tensor
// cores (Backend::LatentAttentionForward): one block per query token holds
// its heads' queries (at most 16: one mma.sync row block) and streams its
// selected keys' latent rows through shared memory, 64 at a time, double
// buffered. A gathered row serves every head, so a query moves topk rows of
// d bf16 (2.4 MB at glm5.2-mini's 2,048 x 576) whatever the sequence length:
// attention per token is flat past the dense part.
#ifndef GLM_KERNELS_CUDA_LATENT_ATTENTION_CUH_
#define GLM_KERNELS_CUDA_LATENT_ATTENTION_CUH_

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// Whether the kernels take these operands: q, kv, out and (for the backward)
// dout bf16 with 16-byte aligned rows; at most 16 heads; d a multiple of 64
// up to 576, dv (out's width) a multiple of 64 up to min(d, 512); and the
// buffers fit a block's shared memory (the forward's with scores_by_columns
// as LatentAttentionForward's). Elsewhere the backend runs the per-head form
// on rows copied from the latent.
bool LatentAttentionSupported(ConstMatrixView q, ConstMatrixView kv,
                              ConstMatrixView out, ConstMatrixView dout,
                              int64_t topk, int64_t heads,
                              bool scores_by_columns);

// q [nq*heads, d], kv [nk, d], keys [nq, topk] (contiguous), out [nq*heads,
// dv], lse [nq*heads] as Backend::LatentAttentionForward. Scores and the
// softmax in fp32; the probabilities enter the value product in bf16 (as
// flash attention's). scores_by_columns: the scores' experiment (each warp
// a quarter of the query's columns over half the tile's keys, the query in
// registers; CudaBackendOptions::latent_scores_by_columns), to be kept or
// dropped by its measurement against the default (each warp every column
// over 8 keys).
void LatentAttentionForward(CudaContext& ctx, ConstMatrixView q,
                            ConstMatrixView kv, const int32_t* keys,
                            int64_t topk, int64_t heads, float scale,
                            MatrixView out, float* lse, bool scores_by_columns);

// Writes dq [nq*heads, d] (F32 or bf16) and dkv [nk, d] (F32 or bf16; either
// may be empty) and key_weights [nq, topk] F32 when given, as
// Backend::LatentAttentionBackward. Each block adds its query's share of the
// key gradient to an fp32 buffer with atomics (a key's sum is over every
// query that selected it, and gathering those per key would read each
// query's rows once per selected key): dkv is repeatable to fp32 rounding,
// not bitwise. dq and key_weights are bitwise repeatable.
void LatentAttentionBackward(CudaContext& ctx, ConstMatrixView q,
                             ConstMatrixView kv, const int32_t* keys,
                             int64_t topk, int64_t heads, float scale,
                             ConstMatrixView out, const float* lse,
                             ConstMatrixView dout, MatrixView dq,
                             MatrixView dkv, MatrixView key_weights);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_LATENT_ATTENTION_CUH_
