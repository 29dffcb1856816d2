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
// Blocks of queries, each against the keys up to its last query (and of
// keys, each against the queries from its first on): the pairs after the
// causal diagonal that the products compute and mask are a quarter of the
// causal ones with four blocks (against all with one); more blocks ran
// slower at glm5.2-mini (bench/NOTES.md, 2026-12-04, seventeenth session).
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

// The call's scratch: the bias, each query's has-key flag, each head's
// statistics and dO . O ([heads, tokens] each), P and dS ([heads, tokens,
// tokens] each, only the blocks' pairs written), CUTLASS's workspace.
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
    MatrixView dk, MatrixView dv, int64_t max_scratch_bytes) {
  if (ctx.precision() != Precision::kBf16 || heads <= 0 || q.rows == 0 ||
      q.rows % heads != 0 || k.rows != q.rows || v.rows != q.rows ||
      out.rows != q.rows || dout.rows != q.rows ||
      !Bf16Operands({q, k, out, dout}, v, {dq, dk, dv})) {
    return false;
  }
  const int64_t tokens = q.rows / heads;
  const int64_t pairs = heads * tokens * tokens;
  const int64_t bytes =
      (tokens * tokens + 2 * pairs) * int64_t{sizeof(__nv_bfloat16)};
  if (bytes > max_scratch_bytes) return false;
  Carver sizer;
  Carve(sizer, tokens, heads);
  Carver carver(static_cast<char*>(ctx.Scratch(sizer.used())));
  const Scratch scratch = Carve(carver, tokens, heads);

  AttentionProductsBlock common;
  common.heads = heads;
  common.dqk = q.cols;
  common.dv = v.cols;
  common.scale = scale;
  common.stats_ld = tokens;
  common.bias_ld = tokens;
  common.pairs_ld = tokens;
  common.pairs_head_stride = tokens * tokens;
  common.workspace = scratch.workspace;
  // Queries [first, end) against keys [0, end), whole kQueryStep steps; the
  // same range of keys against queries [first, tokens).
  const int64_t step =
      (tokens + kBlocks * kQueryStep - 1) / (kBlocks * kQueryStep) * kQueryStep;
  std::vector<AttentionProductsBlock> query_blocks, key_blocks;
  for (int64_t first = 0; first < tokens; first += step) {
    const int64_t end = std::min(tokens, first + step);
    // Rows from query `first`, columns from key `key`.
    auto at = [&](int64_t key) {
      AttentionProductsBlock b = common;
      b.q = From(RowsOf(q), first, heads);
      b.dout = From(RowsOf(dout), first, heads);
      b.k = From(RowsOf(k), key, heads);
      b.v = From(RowsOf(v), key, heads);
      b.stats = scratch.stats + first;
      b.delta = scratch.delta + first;
      const int64_t pair = first * tokens + key;
      b.bias = scratch.bias + pair;
      b.probs = scratch.probs + pair;
      b.grads = scratch.grads + pair;
      return b;
    };
    AttentionProductsBlock queries = at(0);
    queries.nq = end - first;
    queries.nk = end;
    queries.dq = From(GradientOf(dq), first, heads);
    AttentionProductsBlock keys_block = at(first);
    keys_block.nq = tokens - first;
    keys_block.nk = end - first;
    keys_block.dk = From(GradientOf(dk), first, heads);
    keys_block.dv_grad = From(GradientOf(dv), first, heads);
    if (!AttentionProductsSupport(queries) ||
        !AttentionProductsSupport(keys_block)) {
      return false;
    }
    query_blocks.push_back(queries);
    key_blocks.push_back(keys_block);
  }

  SelectionBias(ctx, keys, tokens, topk, tokens, scratch.bias, scratch.has_key);
  LseToStats(ctx, lse, tokens, heads, scratch.stats);
  HeadRowDots(ctx, RowsOf(out), RowsOf(dout), tokens, heads, v.cols,
              scratch.delta, tokens);
  for (const AttentionProductsBlock& b : query_blocks) {
    AttentionScoreProducts(ctx, b);
  }
  for (const AttentionProductsBlock& b : key_blocks) {
    AttentionKeyProducts(ctx, b);
  }
  return true;
}

}  // namespace glm::cuda
