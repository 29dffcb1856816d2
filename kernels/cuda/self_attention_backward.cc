#include "kernels/cuda/self_attention_backward.h"

#include <cuda_bf16.h>

#include <cassert>
#include <initializer_list>

#include "kernels/cuda/attention_key_sums.cuh"
#include "kernels/cuda/attention_mask.cuh"
#include "kernels/cuda/attention_products.cuh"

namespace glm::cuda {
namespace {

HeadRows RowsOf(ConstMatrixView view) {
  return {reinterpret_cast<const __nv_bfloat16*>(view.data), view.stride};
}

HeadGradient GradientOf(MatrixView view) {
  if (view.empty()) return {};
  return {reinterpret_cast<__nv_bfloat16*>(view.data), view.stride};
}

bool Bf16Operands(std::initializer_list<ConstMatrixView> dense,
                  ConstMatrixView v,
                  std::initializer_list<MatrixView> gradients) {
  for (const ConstMatrixView& view : dense) {
    if (view.dtype != ElementType::kBF16 || view.stride != view.cols) {
      return false;
    }
  }
  for (const MatrixView& g : gradients) {
    if (!g.empty() && g.dtype != ElementType::kBF16) return false;
  }
  return v.dtype == ElementType::kBF16;
}

// The call's scratch: the bias, each query's has-key flag, each head's
// statistics and dO . O ([heads, tokens] each), P and dS ([heads, tokens,
// tokens] each, only the causal tiles written), CUTLASS's workspace.
struct Scratch {
  __nv_bfloat16* bias;
  int32_t* has_key;
  float* stats;
  float* delta;
  __nv_bfloat16* probs;
  __nv_bfloat16* grads;
  void* workspace;
};

Scratch Carve(Carver& carve, int64_t tokens, int64_t heads) {
  Scratch s;
  s.bias = carve.Take<__nv_bfloat16>(tokens * tokens);
  s.has_key = carve.Take<int32_t>(tokens);
  s.stats = carve.Take<float>(heads * tokens);
  s.delta = carve.Take<float>(heads * tokens);
  s.probs = carve.Take<__nv_bfloat16>(heads * tokens * tokens);
  s.grads = carve.Take<__nv_bfloat16>(heads * tokens * tokens);
  s.workspace = carve.Take<char>(kAttentionProductsWorkspaceBytes);
  return s;
}

}  // namespace

bool SelfAttentionProductsBackward(
    CudaContext& ctx, ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
    const int32_t* keys, int64_t topk, int64_t heads, float scale,
    ConstMatrixView out, const float* lse, ConstMatrixView dout, MatrixView dq,
    MatrixView dk, MatrixView dv, MatrixView key_weights,
    int64_t max_scratch_bytes) {
  if (ctx.precision() != Precision::kBf16 || heads <= 0 || q.rows == 0 ||
      q.rows % heads != 0 || k.rows != q.rows || v.rows != q.rows ||
      out.rows != q.rows || dout.rows != q.rows ||
      !Bf16Operands({q, k, out, dout}, v, {dq, dk, dv})) {
    return false;
  }
  const int64_t tokens = q.rows / heads;
  assert(key_weights.empty() ||
         (key_weights.rows == tokens && key_weights.cols == topk));
  const int64_t pairs = heads * tokens * tokens;
  const int64_t bytes =
      (tokens * tokens + 2 * pairs) * int64_t{sizeof(__nv_bfloat16)};
  if (bytes > max_scratch_bytes) return false;
  Carver sizer;
  Carve(sizer, tokens, heads);
  Carver carver(static_cast<char*>(ctx.Scratch(sizer.used())));
  const Scratch scratch = Carve(carver, tokens, heads);

  AttentionProducts call;
  call.tokens = tokens;
  call.heads = heads;
  call.dqk = q.cols;
  call.dv = v.cols;
  call.scale = scale;
  call.q = RowsOf(q);
  call.k = RowsOf(k);
  call.v = RowsOf(v);
  call.dout = RowsOf(dout);
  call.stats = scratch.stats;
  call.delta = scratch.delta;
  call.bias = scratch.bias;
  call.probs = scratch.probs;
  call.grads = scratch.grads;
  call.dq = GradientOf(dq);
  call.dk = GradientOf(dk);
  call.dv_grad = GradientOf(dv);
  call.workspace = scratch.workspace;
  if (!AttentionProductsSupport(call)) return false;

  SelectionBias(ctx, keys, tokens, topk, tokens, scratch.bias, scratch.has_key);
  LseToStats(ctx, lse, tokens, heads, scratch.stats);
  HeadRowDots(ctx, RowsOf(out), RowsOf(dout), tokens, heads, v.cols,
              scratch.delta, tokens);
  RunAttentionProducts(ctx, call);
  if (!key_weights.empty()) {
    ProbabilityKeySums(ctx, scratch.probs, tokens, heads, keys, key_weights);
  }
  return true;
}

}  // namespace glm::cuda
