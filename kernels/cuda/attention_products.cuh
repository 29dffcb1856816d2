// The attention backward over a selection as five batched products on
// Hopper's tensor cores (CUTLASS, one batch a head), the softmax's two
// elementwise steps fused into the first two products' epilogues:
//   P  = exp(scale Q K^T + bias - lse)       (bias: 0 where selected, else
//                                              kMaskedScore; written bf16)
//   dS = scale P (dO V^T - delta)            (delta = dO . O; written bf16)
//   dV (+)= P^T dO,  dK (+)= dS^T Q,  dQ = dS K.
// P and dS are held in bf16 ([heads, queries, keys], 4 bytes a pair and head
// in all), as a fused kernel's tiles round them for the same products; the
// products accumulate in fp32. Unlike cuDNN's masked backward, which reads
// the same bias per tile, the products run at the dense GEMM rate: the
// masked pairs cost what the causal ones would.
#ifndef GLM_KERNELS_CUDA_ATTENTION_PRODUCTS_CUH_
#define GLM_KERNELS_CUDA_ATTENTION_PRODUCTS_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/cuda_context.h"

namespace glm::cuda {

// A token-major, head-minor bf16 matrix: head h's row of token t at
// data + (t * heads + h) * stride.
struct HeadRows {
  const __nv_bfloat16* data = nullptr;
  int64_t stride = 0;
};

// A gradient written in the same layout; data null: not wanted.
struct HeadGradient {
  __nv_bfloat16* data = nullptr;
  int64_t stride = 0;
};

// One block of queries [0, nq) (rows of q, dout, stats, delta, bias) against
// keys [0, nk) of k and v.
struct AttentionProductsBlock {
  int64_t nq = 0, nk = 0, heads = 0, dqk = 0, dv = 0;
  float scale = 0.f;
  HeadRows q, k, v, dout;
  // [heads, stats_ld]: each head's log-sum-exp (finite; attention_mask.cuh's
  // LseToStats) and dO . O of its queries.
  const float* stats = nullptr;
  const float* delta = nullptr;
  int64_t stats_ld = 0;
  // [nq, >= nk], rows bias_ld apart (attention_mask.cuh's SelectionBias).
  const __nv_bfloat16* bias = nullptr;
  int64_t bias_ld = 0;
  HeadGradient dq, dk, dv_grad;
  bool add_keys = false;  // dk and dv += (else written)
};

// Whether the products take a block: every extent a multiple of 8 and every
// operand's rows 16-byte aligned (the tensor-memory copies' rule).
bool AttentionProductsSupport(const AttentionProductsBlock& block);

// Bytes of the scratch a block's P and dS take.
int64_t AttentionProductsScratchBytes(const AttentionProductsBlock& block);

// Runs the five products of a block on ctx's stream; scratch holds
// AttentionProductsScratchBytes (256-byte aligned). A function of the
// shapes: deterministic.
void AttentionProductsBackward(CudaContext& ctx,
                               const AttentionProductsBlock& block,
                               void* scratch);

// delta[h * ld + t] = dout . out of head h's row of token t (t < nq), fp32
// sums of the bf16 rows (dv wide).
void HeadRowDots(CudaContext& ctx, HeadRows out, HeadRows dout, int64_t nq,
                 int64_t heads, int64_t dv, float* delta, int64_t ld);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ATTENTION_PRODUCTS_CUH_
