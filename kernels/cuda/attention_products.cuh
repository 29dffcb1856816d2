// The attention backward over a selection as five batched products on
// Hopper's tensor cores (CUTLASS, one batch a head), the softmax's two
// elementwise steps fused into the first two products' epilogues:
//   P  = exp(scale Q K^T + bias - lse)       (bias: 0 where selected, else
//                                              kMaskedScore; written bf16)
//   dS = scale P (dO V^T - delta)            (delta = dO . O; written bf16)
//   dV (+)= P^T dO,  dK (+)= dS^T Q,  dQ = dS K.
// P and dS are held in bf16 (4 bytes a pair and head in all), as a fused
// kernel's tiles round them for the same products; the products accumulate
// in fp32 and are deterministic (a function of the shapes). Unlike cuDNN's
// masked backward, which reads the same bias per tile, the products run at the
// dense GEMM rate: the masked pairs cost what the causal ones would.
#ifndef GLM_KERNELS_CUDA_ATTENTION_PRODUCTS_CUH_
#define GLM_KERNELS_CUDA_ATTENTION_PRODUCTS_CUH_

#include <cuda_bf16.h>

#include <cstddef>
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

// CUTLASS's workspace for the products (their data-parallel persistent
// scheduler keeps none at these shapes; checked per call).
constexpr size_t kAttentionProductsWorkspaceBytes = size_t{1} << 20;

// A block of queries [0, nq) against keys [0, nk): rows of q, dout (and of
// stats, delta, bias, P, dS, dq) from the block's first query, rows of k and
// v (and of dk, dv; columns of P and dS) from its first key.
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
  // P and dS: head h's [nq, nk] at probs + h * pairs_head_stride, rows
  // pairs_ld apart.
  __nv_bfloat16* probs = nullptr;
  __nv_bfloat16* grads = nullptr;
  int64_t pairs_ld = 0, pairs_head_stride = 0;
  HeadGradient dq, dk, dv_grad;
  // kAttentionProductsWorkspaceBytes of scratch for CUTLASS (256-byte
  // aligned).
  void* workspace = nullptr;
};

// Whether the products take a block: every extent a multiple of 8 and every
// operand's rows 16-byte aligned (the tensor-memory copies' rule).
bool AttentionProductsSupport(const AttentionProductsBlock& block);

// Writes P and dS of the block's pairs, and its queries' dq when wanted
// (the block's keys being all the keys its queries see).
void AttentionScoreProducts(CudaContext& ctx,
                            const AttentionProductsBlock& block);

// Writes dv = P^T dO and dk = dS^T Q of the block's keys, each wanted, from
// P and dS of the block's queries (all the queries that see its keys).
void AttentionKeyProducts(CudaContext& ctx,
                          const AttentionProductsBlock& block);

// delta[h * ld + t] = dout . out of head h's row of token t (t < nq), fp32
// sums of the bf16 rows (dv wide).
void HeadRowDots(CudaContext& ctx, HeadRows out, HeadRows dout, int64_t nq,
                 int64_t heads, int64_t dv, float* delta, int64_t ld);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ATTENTION_PRODUCTS_CUH_
