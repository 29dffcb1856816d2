#include "kernels/cuda/self_attention_backward.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "kernels/cuda/attention_mask.cuh"
#include "kernels/cuda/attention_products.cuh"

namespace glm::cuda {
namespace {

// The products' blocks are whole 8-query (16-byte) steps.
constexpr int64_t kQueryStep = 8;
// Blocks of queries, each against the keys up to its last query: the pairs
// after the causal diagonal that the products compute and mask are a
// quarter of the causal ones with four blocks (against all with one).
constexpr int64_t kBlocks = 4;

HeadRows RowsOf(ConstMatrixView view) {
  return {reinterpret_cast<const __nv_bfloat16*>(view.data), view.stride};
}

HeadGradient GradientOf(MatrixView view) {
  if (view.empty()) return {};
  return {reinterpret_cast<__nv_bfloat16*>(view.data), view.stride};
}

// The rows from token `tokens` on.
HeadRows From(HeadRows rows, int64_t tokens, int64_t heads) {
  rows.data += tokens * heads * rows.stride;
  return rows;
}
HeadGradient From(HeadGradient g, int64_t tokens, int64_t heads) {
  if (g.data != nullptr) g.data += tokens * heads * g.stride;
  return g;
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

// What every block shares; its queries and keys set by the caller.
AttentionProductsBlock CommonBlock(ConstMatrixView q, ConstMatrixView k,
                                   ConstMatrixView v, ConstMatrixView dout,
                                   int64_t heads, float scale, int64_t tokens,
                                   MatrixView dq, MatrixView dk,
                                   MatrixView dv) {
  AttentionProductsBlock b;
  b.heads = heads;
  b.dqk = q.cols;
  b.dv = v.cols;
  b.scale = scale;
  b.q = RowsOf(q);
  b.k = RowsOf(k);
  b.v = RowsOf(v);
  b.dout = RowsOf(dout);
  b.stats_ld = tokens;
  b.bias_ld = tokens;
  b.dq = GradientOf(dq);
  b.dk = GradientOf(dk);
  b.dv_grad = GradientOf(dv);
  return b;
}

}  // namespace

bool SelfAttentionProductsBackward(
    CudaContext& ctx, ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
    const int32_t* keys, int64_t topk, int64_t heads, float scale,
    ConstMatrixView out, const float* lse, ConstMatrixView dout, MatrixView dq,
    MatrixView dk, MatrixView dv, int64_t max_scratch_bytes) {
  if (ctx.precision() != Precision::kBf16 || heads <= 0 || q.rows == 0 ||
      q.rows % heads != 0 || k.rows != q.rows || v.rows != q.rows ||
      out.rows != q.rows || dout.rows != q.rows ||
      !Bf16Operands({q, k, out, dout}, v, {dq, dk, dv})) {
    return false;
  }
  const int64_t tokens = q.rows / heads;
  const AttentionProductsBlock common =
      CommonBlock(q, k, v, dout, heads, scale, tokens, dq, dk, dv);
  // Block i: queries [first_i, end_i) against keys [0, end_i), whole
  // kQueryStep steps, at least kBlocks of them and more where the largest
  // (the last) would hold more than max_scratch_bytes of P and dS.
  const int64_t pair_bytes =
      2 * heads * tokens * static_cast<int64_t>(sizeof(__nv_bfloat16));
  const int64_t step = std::min(
      (tokens + kBlocks * kQueryStep - 1) / (kBlocks * kQueryStep) * kQueryStep,
      max_scratch_bytes / pair_bytes / kQueryStep * kQueryStep);
  const int64_t bias_bytes =
      tokens * tokens * static_cast<int64_t>(sizeof(__nv_bfloat16));
  if (step == 0 || bias_bytes > max_scratch_bytes) return false;
  std::vector<AttentionProductsBlock> blocks;
  for (int64_t first = 0; first < tokens; first += step) {
    AttentionProductsBlock b = common;
    b.nq = std::min(step, tokens - first);
    b.nk = first + b.nq;
    b.q = From(b.q, first, heads);
    b.dout = From(b.dout, first, heads);
    b.dq = From(b.dq, first, heads);
    b.add_keys = b.nk < tokens;
    blocks.push_back(b);
  }
  const int64_t block_bytes = AttentionProductsScratchBytes(blocks.back());

  Carver sizer;
  sizer.Take<__nv_bfloat16>(tokens * tokens);
  sizer.Take<int32_t>(tokens);
  sizer.Take<float>(2 * heads * tokens);
  sizer.Take<char>(block_bytes);
  Carver carve(static_cast<char*>(ctx.Scratch(sizer.used())));
  auto* bias = carve.Take<__nv_bfloat16>(tokens * tokens);
  auto* has_key = carve.Take<int32_t>(tokens);
  float* stats = carve.Take<float>(2 * heads * tokens);
  float* delta = stats + heads * tokens;
  void* block_scratch = carve.Take<char>(block_bytes);
  for (AttentionProductsBlock& b : blocks) {
    const int64_t first = b.nk - b.nq;
    b.bias = bias + first * tokens;
    b.stats = stats + first;
    b.delta = delta + first;
    if (!AttentionProductsSupport(b)) return false;
  }

  SelectionBias(ctx, keys, tokens, topk, tokens, bias, has_key);
  LseToStats(ctx, lse, tokens, heads, stats);
  HeadRowDots(ctx, RowsOf(out), RowsOf(dout), tokens, heads, v.cols, delta,
              tokens);
  // The last block writes every key's gradients; the others add theirs.
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
    AttentionProductsBackward(ctx, *b, block_scratch);
  }
  return true;
}

}  // namespace glm::cuda
