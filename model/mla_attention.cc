#include "model/mla_attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace glm {
namespace {

// The projected norms inside MLA use transformers' default eps.
constexpr float kLoraNormEps = 1e-6f;

float Scale(const AttentionSpec& spec) {
  return 1.f / std::sqrt(static_cast<float>(spec.qk_dim()));
}

}  // namespace

AttentionSpec MakeAttentionSpec(const ModelConfig& c,
                                float indexer_loss_coeff) {
  AttentionSpec s;
  s.heads = c.num_attention_heads;
  s.q_lora_rank = c.q_lora_rank;
  s.kv_lora_rank = c.kv_lora_rank;
  s.nope_dim = c.qk_nope_head_dim;
  s.rope_dim = c.qk_rope_head_dim;
  s.v_dim = c.v_head_dim;
  s.rope_theta = static_cast<float>(c.rope_theta);
  s.indexer.heads = c.index_n_heads;
  s.indexer.head_dim = c.index_head_dim;
  s.indexer.rope_dim = c.qk_rope_head_dim;
  s.indexer.topk = c.index_topk;
  s.indexer.rope_theta = s.rope_theta;
  s.indexer_loss_coeff = indexer_loss_coeff;
  return s;
}

namespace {

// The rank's split of the layout's tokens; one rank without a parallel spec.
struct AttentionRows {
  TokenParallel& parallel;
  TokenRows chunk;   // the queries: this rank's context chunk
  TokenRange local;  // x's rows: its tensor-parallel part of the chunk's rows
  std::vector<int32_t> positions;  // of the chunk's tokens
  // The positions where the ops read them: the layout's own when the chunk
  // is every token (one rank: no upload per layer), else the chunk's.
  const IndexTensor* layout_positions;
  IndexTensor chunk_positions;
  const int32_t* op_positions() const {
    return chunk_positions.empty() ? layout_positions->data()
                                   : chunk_positions.data();
  }
};

// The queries that select every causal key (Backend's full_queries): with
// the queries the layout's first tokens and the keys the same tokens (one
// rank, no context split), the first top-k tokens of the first sequence,
// whose selection holds all their keys.
int64_t FullQueries(const TokenLayout& layout, int64_t queries, int64_t keys,
                    int64_t topk) {
  if (queries != keys || keys > layout.tokens || layout.seq_end.empty()) {
    return 0;
  }
  return std::min({topk, int64_t{layout.seq_end[0]}, queries});
}

AttentionRows RowsOf(const AttentionSpec& spec, const TokenLayout& layout,
                     TokenParallel& one_rank) {
  TokenParallel& parallel = spec.parallel ? *spec.parallel : one_rank;
  TokenRows chunk = parallel.ChunkRows(layout.tokens);
  std::vector<int32_t> positions = chunk.Select(layout.positions);
  const bool whole = positions == layout.positions;
  IndexTensor chunk_positions =
      whole ? IndexTensor() : IndexTensor::FromHost(positions);
  return {parallel,
          std::move(chunk),
          parallel.LocalInChunk(layout.tokens),
          std::move(positions),
          &layout.op_positions,
          std::move(chunk_positions)};
}

// The first query row that attends in the latent space (n: none): see
// AttentionSpec::latent_from.
int64_t LatentFrom(const AttentionParameters& p, const AttentionSpec& spec,
                   const AttentionRows& rows, int64_t n) {
  const bool loss_in_forward = p.has_indexer &&
                               spec.indexer_loss_coeff != 0.f &&
                               !spec.indexer_loss_in_backward;
  if (spec.latent_from <= 0 || rows.parallel.tp() > 1 ||
      rows.parallel.cp() > 1 || loss_in_forward) {
    return n;
  }
  return std::min(n, spec.latent_from);
}

// Head h's rows of a contiguous [tokens * heads, width] view, columns
// [start, start + count): [tokens, count], heads * width apart.
template <typename View>
View HeadRows(View v, int64_t heads, int64_t h, int64_t start, int64_t count) {
  assert(v.stride == v.cols && v.rows % heads == 0);
  View joined = v;
  joined.rows = v.rows / heads;
  joined.cols = joined.stride = v.cols * heads;
  return joined.Columns(h * v.cols + start, count);
}

// kv_b_proj's rows of head h: W_UK (nope rows, the keys' part) and W_UV (v
// rows), each [*, kv_lora_rank]; of the weight or of its gradient.
template <typename View>
View KeyUp(View w, const AttentionSpec& spec, int64_t h) {
  return w.Rows(h * (spec.nope_dim + spec.v_dim), spec.nope_dim);
}
template <typename View>
View ValueUp(View w, const AttentionSpec& spec, int64_t h) {
  return w.Rows(h * (spec.nope_dim + spec.v_dim) + spec.nope_dim, spec.v_dim);
}

// Keys and values from the chunk's compressed latents: the per-head form's for
// the first `per_head` tokens; with fewer than all, every token's latent row
// too (latent | RoPE(k_rope)).
void KeysForward(Backend& backend, const AttentionParameters& p,
                 const AttentionSpec& spec, ConstMatrixView x_chunk,
                 const TokenLayout& layout, AttentionRows& rows,
                 int64_t per_head, AttentionActivations* acts) {
  const int64_t heads = spec.heads, nope = spec.nope_dim, rope = spec.rope_dim,
                vdim = spec.v_dim, all = layout.tokens,
                lora = spec.kv_lora_rank;
  acts->kv_a = Tensor::ForOutput({x_chunk.rows, lora + rope});
  backend.Linear(x_chunk, p.kv_a_proj_with_mqa.value.Matrix(),
                 acts->kv_a.Matrix(), false);
  if (rows.parallel.cp() > 1) {
    acts->kv_a = rows.parallel.GatherAll(acts->kv_a.Matrix(), all);
  }
  acts->kv_a_rstd = Tensor::ForOutput({all});
  acts->latent = Tensor::ForOutput({all, lora}, backend.ActivationType());
  ConstMatrixView kv_a = acts->kv_a.Matrix();
  backend.RmsNormForward(kv_a.Columns(0, lora), p.kv_a_layernorm.value.data(),
                         kLoraNormEps, acts->latent.Matrix(),
                         acts->kv_a_rstd.data());
  Tensor k_rope = Tensor::ForOutput({all, rope});
  backend.RopeForward(kv_a.Columns(lora, rope), layout.op_positions.data(), 1,
                      spec.rope_theta, k_rope.Matrix());
  // The attention's operands (kv's value columns, the keys, the queries) and
  // its output are read only by the attention and products: they are kept
  // in the backend's activation type.
  const ElementType type = backend.ActivationType();
  if (per_head < all) {
    acts->kv_latent = Tensor::ForOutput({all, lora + rope}, type);
    backend.Copy(acts->latent.Matrix(),
                 acts->kv_latent.Matrix().Columns(0, lora));
    backend.Copy(k_rope.Matrix(), acts->kv_latent.Matrix().Columns(lora, rope));
  }
  acts->kv = Tensor::ForOutput({per_head, heads * (nope + vdim)}, type);
  acts->key = Tensor::ForOutput({per_head * heads, spec.qk_dim()}, type);
  backend.Linear(acts->latent.Matrix().Rows(0, per_head),
                 p.kv_b_proj.value.Matrix(), acts->kv.Matrix(), false);
  ConstMatrixView kv_rows = acts->kv.Matrix().SplitRows(heads);
  backend.Copy(kv_rows.Columns(0, nope), acts->key.Matrix().Columns(0, nope));
  backend.RepeatRows(k_rope.Matrix().Rows(0, per_head), heads,
                     acts->key.Matrix().Columns(nope, rope));
}

// Queries [from, n) in the latent space: each head's nope part through its
// W_UK (q_nope W_UK: the key's up-projection moved onto the query) beside its
// rope part, attended over the latent rows, and the output up through W_UV
// into attn's rows.
void LatentForward(Backend& backend, const AttentionParameters& p,
                   const AttentionSpec& spec, int64_t from, int64_t n,
                   AttentionActivations* acts) {
  const int64_t heads = spec.heads, nope = spec.nope_dim, rope = spec.rope_dim,
                lora = spec.kv_lora_rank, m = n - from,
                topk = acts->topk->dim(1);
  // Written by LinearBackward's dx (added to where that is F32: zeroed).
  acts->query_latent = WrittenInputGradient(backend, {m * heads, lora + rope});
  acts->out_latent =
      Tensor::ForOutput({m * heads, lora}, backend.ActivationType());
  const MatrixView q_latent = acts->query_latent.Matrix();
  const ConstMatrixView query =
      acts->query.Matrix().Rows(from * heads, m * heads);
  const ConstMatrixView w = p.kv_b_proj.value.Matrix();
  for (int64_t h = 0; h < heads; ++h) {
    // q_nope W_UK is LinearBackward's dx = dy w for dy = q_nope (x only
    // shapes it without dw).
    const MatrixView q_h = HeadRows(q_latent, heads, h, 0, lora);
    backend.LinearBackward(q_h, KeyUp(w, spec, h),
                           HeadRows(query, heads, h, 0, nope), q_h, {});
  }
  backend.Copy(query.Columns(nope, rope), q_latent.Columns(lora, rope));
  backend.LatentAttentionForward(q_latent, acts->kv_latent.Matrix(),
                                 acts->topk->data() + from * topk, topk, heads,
                                 Scale(spec), acts->out_latent.Matrix(),
                                 acts->lse.data() + from * heads);
  const MatrixView attn = acts->attn.Matrix().Rows(from, m);
  for (int64_t h = 0; h < heads; ++h) {
    backend.Linear(HeadRows(acts->out_latent.Matrix(), heads, h, 0, lora),
                   ValueUp(w, spec, h),
                   attn.Columns(h * spec.v_dim, spec.v_dim), false);
  }
}

// Whether this layer forms an indexer loss (in the pass the spec names).
bool HasIndexerLoss(const AttentionParameters& p, const AttentionSpec& spec) {
  return p.has_indexer && spec.indexer_loss_coeff != 0.f;
}

// The indexer loss of this rank's own queries against `head_sum` [n, topk],
// the attention their keys receive summed over this rank's heads; under
// tensor parallelism summed over every rank's heads.
void IndexerLoss(Backend& backend, const AttentionSpec& spec,
                 const TokenLayout& layout, AttentionRows& rows,
                 const AttentionActivations& acts, ConstMatrixView head_sum,
                 IndexerLossGradients* grads) {
  if (rows.parallel.tp() == 1) {
    IndexerLossForward(backend, spec.indexer, acts.own_topk, head_sum,
                       spec.indexer_loss_coeff, {0, head_sum.rows},
                       layout.tokens, acts.indexer, grads,
                       spec.indexer_loss_sum);
    return;
  }
  const Tensor target =
      rows.parallel.ReduceScatterChunk(head_sum, layout.tokens);
  IndexerLossForward(backend, spec.indexer, acts.own_topk, target.Matrix(),
                     spec.indexer_loss_coeff, rows.local, layout.tokens,
                     acts.indexer, grads, spec.indexer_loss_sum);
}

// LatentForward's gradients: W_UV's and the latent output's, the latent
// attention's (dq into dquery's rows [from, n) through W_UK, with W_UK's
// gradient; dkv_latent [N, kv_lora_rank + rope] written in F32) and the key
// weights of the latent queries when given.
void LatentBackward(Backend& backend, AttentionParameters& p,
                    const AttentionSpec& spec, const AttentionActivations& acts,
                    int64_t from, ConstMatrixView dattn, MatrixView dquery,
                    MatrixView dkv_latent, MatrixView key_weights) {
  const int64_t heads = spec.heads, nope = spec.nope_dim, rope = spec.rope_dim,
                lora = spec.kv_lora_rank, m = dattn.rows - from,
                topk = acts.topk->dim(1);
  const ConstMatrixView w = p.kv_b_proj.value.Matrix();
  const MatrixView dw = p.kv_b_proj.grad.Matrix();
  const ConstMatrixView out_latent = acts.out_latent.Matrix(),
                        q_latent = acts.query_latent.Matrix(),
                        query =
                            acts.query.Matrix().Rows(from * heads, m * heads),
                        dattn_rows = dattn.Rows(from, m);
  Tensor dout_latent = WrittenInputGradient(backend, {m * heads, lora});
  for (int64_t h = 0; h < heads; ++h) {
    backend.LinearBackward(HeadRows(out_latent, heads, h, 0, lora),
                           ValueUp(w, spec, h),
                           dattn_rows.Columns(h * spec.v_dim, spec.v_dim),
                           HeadRows(dout_latent.Matrix(), heads, h, 0, lora),
                           ValueUp(dw, spec, h));
  }
  Tensor dq_latent =
      Tensor::ForOutput({m * heads, lora + rope}, backend.ActivationType());
  backend.LatentAttentionBackward(
      q_latent, acts.kv_latent.Matrix(), acts.topk->data() + from * topk, topk,
      heads, Scale(spec), out_latent, acts.lse.data() + from * heads,
      dout_latent.Matrix(), dq_latent.Matrix(), dkv_latent, key_weights);
  const MatrixView dq_rows = dquery.Rows(from * heads, m * heads);
  for (int64_t h = 0; h < heads; ++h) {
    const ConstMatrixView dq_h =
        HeadRows(ConstMatrixView(dq_latent.Matrix()), heads, h, 0, lora);
    backend.Linear(dq_h, KeyUp(w, spec, h),
                   HeadRows(dq_rows, heads, h, 0, nope), false);
    // W_UK's gradient: LinearBackward's dw = dy^T x for dy = q_nope.
    backend.LinearBackward(dq_h, KeyUp(w, spec, h),
                           HeadRows(query, heads, h, 0, nope), {},
                           KeyUp(dw, spec, h));
  }
  backend.Copy(ConstMatrixView(dq_latent.Matrix()).Columns(lora, rope),
               dq_rows.Columns(nope, rope));
}

}  // namespace

void AttentionForward(Backend& backend, const AttentionParameters& p,
                      const AttentionSpec& spec, ConstMatrixView x,
                      const TokenLayout& layout, const IndexTensor* shared_topk,
                      ConstMatrixView residual, MatrixView out,
                      AttentionActivations* acts) {
  TokenParallel one_rank(nullptr, nullptr);
  AttentionRows rows = RowsOf(spec, layout, one_rank);
  // Sequence parallelism: the chunk's queries need every tensor rank's rows.
  if (rows.parallel.tp() > 1)
    acts->x_chunk = rows.parallel.GatherChunk(x, layout.tokens);
  ConstMatrixView xc = rows.parallel.tp() > 1 ? acts->x_chunk.Matrix() : x;
  const int64_t n = xc.rows, heads = spec.heads, nope = spec.nope_dim,
                rope = spec.rope_dim, qk = spec.qk_dim(), vdim = spec.v_dim;
  const int32_t* pos = rows.op_positions();
  // Queries.
  acts->q_a = Tensor::ForOutput({n, spec.q_lora_rank});
  acts->q_a_rstd = Tensor::ForOutput({n});
  // The normed latents are read only by products (q_b_proj, the indexer's
  // wq_b, kv_b_proj).
  acts->q_resid =
      Tensor::ForOutput({n, spec.q_lora_rank}, backend.ActivationType());
  backend.Linear(xc, p.q_a_proj.value.Matrix(), acts->q_a.Matrix(), false);
  backend.RmsNormForward(acts->q_a.Matrix(), p.q_a_layernorm.value.data(),
                         kLoraNormEps, acts->q_resid.Matrix(),
                         acts->q_a_rstd.data());
  // In the activation type, as KeysForward's keys: q_b_proj writes every
  // head's row in place, and RoPE rotates the rope columns from an F32 copy
  // of them (it cannot run in place: each output reads another's pair).
  acts->query = Tensor::ForOutput({n * heads, qk}, backend.ActivationType());
  MatrixView query = acts->query.Matrix();
  backend.Linear(acts->q_resid.Matrix(), p.q_b_proj.value.Matrix(),
                 query.JoinRows(heads), false);
  Tensor q_rope = Tensor::ForOutput({n * heads, rope});
  backend.Copy(query.Columns(nope, rope), q_rope.Matrix());
  backend.RopeForward(q_rope.Matrix(), pos, heads, spec.rope_theta,
                      query.Columns(nope, rope));
  const int64_t latent_from = LatentFrom(p, spec, rows, n);
  // Keys and values from the compressed latent; k_rope is shared by all heads.
  KeysForward(backend, p, spec, xc, layout, rows,
              latent_from < n ? latent_from : layout.tokens, acts);
  // Key selection.
  if (p.has_indexer) {
    // The indexer loss (below, or in the backward) reads the indexer's
    // operands over every row when the tensor ranks do not split them.
    const bool loss_follows =
        HasIndexerLoss(p, spec) && rows.parallel.tp() == 1;
    IndexerForward(backend, p.indexer, spec.indexer, xc, acts->q_resid.Matrix(),
                   layout, rows.chunk, rows.op_positions(), rows.parallel,
                   loss_follows, &acts->indexer, &acts->own_topk);
    acts->topk = &acts->own_topk;
  } else {
    assert(shared_topk != nullptr);
    acts->topk = shared_topk;
  }
  const int64_t topk = acts->topk->dim(1);
  acts->attn = Tensor::ForOutput({n, heads * vdim}, backend.ActivationType());
  acts->lse = Tensor::ForOutput({n * heads});
  const int64_t keys = acts->key.dim(0) / heads;
  backend.SparseAttentionForward(
      acts->query.Matrix().Rows(0, latent_from * heads), acts->key.Matrix(),
      acts->kv.Matrix().SplitRows(heads).Columns(nope, vdim),
      acts->topk->data(), topk, FullQueries(layout, latent_from, keys, topk),
      heads, Scale(spec),
      acts->attn.Matrix().Rows(0, latent_from).SplitRows(heads),
      acts->lse.data());
  if (latent_from < n) LatentForward(backend, p, spec, latent_from, n, acts);
  if (rows.parallel.tp() > 1) {
    // Row-parallel o_proj: each rank holds a part of every output.
    Tensor partial = Tensor::ForOutput({n, out.cols});
    backend.Linear(acts->attn.Matrix(), p.o_proj.value.Matrix(),
                   partial.Matrix(), false);
    backend.Copy(
        rows.parallel.ReduceScatterChunk(partial.Matrix(), layout.tokens)
            .Matrix(),
        out);
    if (residual.data != nullptr) backend.Axpy(1.f, residual, out);
  } else if (residual.data != nullptr) {
    backend.LinearAdd(acts->attn.Matrix(), p.o_proj.value.Matrix(), residual,
                      out);
  } else {
    backend.Linear(acts->attn.Matrix(), p.o_proj.value.Matrix(), out, false);
  }
  if (HasIndexerLoss(p, spec) && !spec.indexer_loss_in_backward) {
    Tensor head_sum = Tensor::ForOutput({n, topk});
    backend.SparseAttentionKeyWeights(
        acts->query.Matrix(), acts->key.Matrix(), acts->own_topk.data(), topk,
        spec.heads, Scale(spec), acts->lse.data(), head_sum.Matrix());
    IndexerLoss(backend, spec, layout, rows, *acts, head_sum.Matrix(),
                &acts->indexer_grads);
    // Read by the loss alone.
    acts->indexer.kept_scores = KeptIndexerScores();
  }
}

void AttentionBackward(Backend& backend, AttentionParameters& p,
                       const AttentionSpec& spec, ConstMatrixView x,
                       const TokenLayout& layout,
                       const AttentionActivations& acts, ConstMatrixView dout,
                       MatrixView dx) {
  TokenParallel one_rank(nullptr, nullptr);
  AttentionRows rows = RowsOf(spec, layout, one_rank);
  const bool split = rows.parallel.tp() > 1;
  ConstMatrixView xc = split ? acts.x_chunk.Matrix() : x;
  const Tensor dout_chunk =
      split ? rows.parallel.GatherChunk(dout, layout.tokens) : Tensor();
  ConstMatrixView dout_c = split ? dout_chunk.Matrix() : dout;
  Tensor dx_chunk = split ? Tensor({xc.rows, xc.cols}) : Tensor();
  MatrixView dxc = split ? dx_chunk.Matrix() : dx;
  const int64_t n = xc.rows, all = layout.tokens, heads = spec.heads,
                nope = spec.nope_dim, rope = spec.rope_dim, qk = spec.qk_dim(),
                vdim = spec.v_dim;
  const int32_t* pos = rows.op_positions();
  // The attention's output gradient is read only by its backward.
  Tensor dattn = WrittenInputGradient(backend, {n, heads * vdim});
  backend.LinearBackward(acts.attn.Matrix(), p.o_proj.value.Matrix(), dout_c,
                         dattn.Matrix(), p.o_proj.grad.Matrix());
  const int64_t latent_from = LatentFrom(p, spec, rows, n),
                per_head = acts.key.dim(0) / heads, lora = spec.kv_lora_rank;
  // Written, not added, by the ops below: their buffers start unfilled. The
  // query, key and kv gradients are read only by copies, RoPE, the sum of the
  // keys' rope part over heads (into F32) and the q_b and kv_b products: the
  // activation type.
  const ElementType type = backend.ActivationType();
  Tensor dquery = Tensor::ForOutput({n * heads, qk}, type),
         dkey = Tensor::ForOutput({per_head * heads, qk}, type),
         dkv = Tensor::ForOutput({per_head, heads * (nope + vdim)}, type);
  MatrixView dkv_rows = dkv.Matrix().SplitRows(heads);
  const int64_t topk = acts.topk->dim(1);
  const bool loss_here =
      HasIndexerLoss(p, spec) && spec.indexer_loss_in_backward;
  Tensor head_sum = loss_here ? Tensor::ForOutput({n, topk}) : Tensor();
  backend.SparseAttentionBackward(
      acts.query.Matrix().Rows(0, latent_from * heads), acts.key.Matrix(),
      acts.kv.Matrix().SplitRows(heads).Columns(nope, vdim), acts.topk->data(),
      topk, FullQueries(layout, latent_from, per_head, topk), heads,
      Scale(spec), acts.attn.Matrix().Rows(0, latent_from).SplitRows(heads),
      acts.lse.data(), dattn.Matrix().Rows(0, latent_from).SplitRows(heads),
      dquery.Matrix().Rows(0, latent_from * heads), dkey.Matrix(),
      dkv_rows.Columns(nope, vdim),
      RowsOrEmpty(head_sum.Matrix(), 0, latent_from));
  // The latent queries' gradient of every token's latent row (F32).
  Tensor dkv_latent;
  if (latent_from < n) {
    dkv_latent = Tensor::ForOutput({all, lora + rope});
    LatentBackward(
        backend, p, spec, acts, latent_from, dattn.Matrix(), dquery.Matrix(),
        dkv_latent.Matrix(),
        RowsOrEmpty(head_sum.Matrix(), latent_from, n - latent_from));
  }
  IndexerLossGradients formed_here;
  if (loss_here) {
    IndexerLoss(backend, spec, layout, rows, acts, head_sum.Matrix(),
                &formed_here);
  }
  // Keys: nope part to kv_b_proj's output, rope part summed over heads; the
  // latent rows' gradient added to both.
  backend.Copy(dkey.Matrix().Columns(0, nope), dkv_rows.Columns(0, nope));
  Tensor dk_rope({all, rope});
  backend.SumRowGroups(dkey.Matrix().Columns(nope, rope), heads,
                       dk_rope.Matrix().Rows(0, per_head));
  Tensor dkv_a({all, lora + rope}), dlatent({all, lora});
  if (!dkv_latent.empty()) {
    backend.Axpy(1.f, dkv_latent.Matrix().Columns(lora, rope),
                 dk_rope.Matrix());
    backend.Axpy(1.f, dkv_latent.Matrix().Columns(0, lora), dlatent.Matrix());
  }
  backend.RopeBackward(dk_rope.Matrix(), layout.op_positions.data(), 1,
                       spec.rope_theta, dkv_a.Matrix().Columns(lora, rope));
  backend.LinearBackward(acts.latent.Matrix().Rows(0, per_head),
                         p.kv_b_proj.value.Matrix(), dkv.Matrix(),
                         dlatent.Matrix().Rows(0, per_head),
                         p.kv_b_proj.grad.Matrix());
  backend.RmsNormBackward(acts.kv_a.Matrix().Columns(0, lora),
                          p.kv_a_layernorm.value.data(), acts.kv_a_rstd.data(),
                          dlatent.Matrix(), {}, dkv_a.Matrix().Columns(0, lora),
                          p.kv_a_layernorm.grad.data());
  // Every chunk's queries read this chunk's keys.
  if (rows.parallel.cp() > 1) {
    dkv_a = rows.parallel.ReduceScatterAll(dkv_a.Matrix(), all);
  }
  backend.LinearBackward(xc, p.kv_a_proj_with_mqa.value.Matrix(),
                         dkv_a.Matrix(), dxc,
                         p.kv_a_proj_with_mqa.grad.Matrix());
  // Queries.
  // The rope columns' gradient rotated back in place of dquery's (from a
  // copy), whose rows are then q_b_proj's output gradient.
  Tensor dq_resid({n, spec.q_lora_rank}), dq_a({n, spec.q_lora_rank});
  MatrixView dq_rows = dquery.Matrix();
  Tensor dq_rope = Tensor::ForOutput({n * heads, rope}, type);
  backend.Copy(dq_rows.Columns(nope, rope), dq_rope.Matrix());
  backend.RopeBackward(dq_rope.Matrix(), pos, heads, spec.rope_theta,
                       dq_rows.Columns(nope, rope));
  backend.LinearBackward(acts.q_resid.Matrix(), p.q_b_proj.value.Matrix(),
                         dq_rows.JoinRows(heads), dq_resid.Matrix(),
                         p.q_b_proj.grad.Matrix());
  backend.RmsNormBackward(acts.q_a.Matrix(), p.q_a_layernorm.value.data(),
                          acts.q_a_rstd.data(), dq_resid.Matrix(), {},
                          dq_a.Matrix(), p.q_a_layernorm.grad.data());
  backend.LinearBackward(xc, p.q_a_proj.value.Matrix(), dq_a.Matrix(), dxc,
                         p.q_a_proj.grad.Matrix());
  if (HasIndexerLoss(p, spec)) {
    IndexerBackward(backend, p.indexer, spec.indexer, xc, acts.q_resid.Matrix(),
                    layout, rows.op_positions(), rows.parallel, acts.indexer,
                    loss_here ? formed_here : acts.indexer_grads);
  }
  // The chunk's input gradient is a partial sum on each tensor rank.
  if (split) {
    backend.Axpy(1.f, rows.parallel.ReduceScatterChunk(dxc, all).Matrix(), dx);
  }
}

}  // namespace glm
