// The attention backward over a selection as five batched products on
// Hopper's tensor cores (CUTLASS, one batch a head), the softmax's two
// elementwise steps fused into the first two products' epilogues:
//   P  = exp(scale Q K^T + bias - lse)       (bias: 0 where selected, else
//                                              kMaskedScore; written bf16)
//   dS = scale P (dO V^T - delta)            (delta = dO . O; written bf16)
//   dV = P^T dO,  dK = dS^T Q,  dQ = dS K.
// P and dS are held in bf16 (4 bytes a pair and head in all), as a fused
// kernel's tiles round them for the same products; the products accumulate
// in fp32 and are deterministic (a function of the shapes). Unlike cuDNN's
// masked backward, which reads the same bias per tile, the products run at
// the dense GEMM rate over the causal tiles alone.
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

// CUTLASS's workspace for the products (their persistent scheduler keeps
// none; checked per call).
constexpr size_t kAttentionProductsWorkspaceBytes = size_t{1} << 20;

// The causal self-attention of `tokens` tokens, one batch a head: query t
// sees the keys s <= t, of those the selected ones (through the bias).
struct AttentionProducts {
  int64_t tokens = 0, heads = 0, dqk = 0, dv = 0;
  float scale = 0.f;
  HeadRows q, k, v, dout;
  // [heads, tokens]: each head's log-sum-exp (finite; attention_mask.cuh's
  // LseToStats) and dO . O of its queries.
  const float* stats = nullptr;
  const float* delta = nullptr;
  // [tokens, tokens] (attention_mask.cuh's SelectionBias).
  const __nv_bfloat16* bias = nullptr;
  // P and dS: [heads, tokens, tokens]; only the causal tiles are written
  // (kernels/cuda/causal_tile_scheduler.cuh), and only those read.
  __nv_bfloat16* probs = nullptr;
  __nv_bfloat16* grads = nullptr;
  HeadGradient dq, dk, dv_grad;
  // kAttentionProductsWorkspaceBytes of scratch for CUTLASS (256-byte
  // aligned).
  void* workspace = nullptr;
};

// Whether the products take a call: every extent a multiple of 8 and every
// operand's rows 16-byte aligned (the tensor-memory copies' rule).
bool AttentionProductsSupport(const AttentionProducts& call);

// Writes P and dS over the causal tiles, then each wanted gradient: dq from
// the keys up to each query tile's last, dk and dv from the queries from
// each key tile's first; one launch a product.
void RunAttentionProducts(CudaContext& ctx, const AttentionProducts& call);

// delta[h * ld + t] = dout . out of head h's row of token t (t < nq), fp32
// sums of the bf16 rows (dv wide).
void HeadRowDots(CudaContext& ctx, HeadRows out, HeadRows dout, int64_t nq,
                 int64_t heads, int64_t dv, float* delta, int64_t ld);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ATTENTION_PRODUCTS_CUH_
