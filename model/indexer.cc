#include "model/indexer.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace glm {
namespace {

constexpr float kKNormEps = 1e-6f;

float ScoreScale(const IndexerSpec& spec) {
  return 1.f / std::sqrt(static_cast<float>(spec.head_dim));
}

// Every tensor rank's top-k rows, in chunk order. Key indices travel as
// floats, exact below 2^24 tokens.
IndexTensor ShareTopK(TokenParallel& parallel, const IndexTensor& mine,
                      int64_t tokens) {
  assert(tokens < (int64_t{1} << 24));
  const std::vector<int32_t> keys = mine.HostValues();
  Tensor values({mine.dim(0), mine.dim(1)}, nullptr);
  std::copy(keys.begin(), keys.end(), values.values().begin());
  // The gather reads and writes where the pass's tensors live.
  const Tensor chunk =
      parallel.GatherChunk(values.CopyTo(CurrentAllocator()).Matrix(), tokens)
          .CopyTo(nullptr);
  IndexTensor shared({chunk.dim(0), chunk.dim(1)}, 0, nullptr);
  for (int64_t i = 0; i < chunk.numel(); ++i) {
    shared.data()[i] = static_cast<int32_t>(chunk.data()[i]);
  }
  return shared.CopyTo(CurrentAllocator());
}

}  // namespace

void IndexerForward(Backend& backend, const IndexerParameters& p,
                    const IndexerSpec& spec, ConstMatrixView x,
                    ConstMatrixView q_resid, const TokenLayout& layout,
                    const TokenRows& chunk, const int32_t* pos,
                    TokenParallel& parallel, bool loss_follows,
                    IndexerActivations* acts, IndexTensor* topk) {
  const int64_t n = x.rows, dim = spec.head_dim, rope = spec.rope_dim;
  // Queries: [rope | pass] per head, RoPE on the first rope_dim.
  acts->q_raw = Tensor::ForOutput({n, spec.heads * dim});
  backend.Linear(q_resid, p.wq_b.value.Matrix(), acts->q_raw.Matrix(), false);
  acts->q = Tensor::ForOutput({n * spec.heads, dim});
  ConstMatrixView q_raw = acts->q_raw.Matrix().SplitRows(spec.heads);
  backend.Copy(q_raw.Columns(rope, dim - rope),
               acts->q.Matrix().Columns(rope, dim - rope));
  backend.RopeForward(q_raw.Columns(0, rope), pos, spec.heads, spec.rope_theta,
                      acts->q.Matrix().Columns(0, rope));
  // One key per token: LayerNorm(wk(x)), same split.
  acts->k_raw = Tensor::ForOutput({n, dim});
  backend.Linear(x, p.wk.value.Matrix(), acts->k_raw.Matrix(), false);
  acts->k_mean = Tensor::ForOutput({n});
  acts->k_rstd = Tensor::ForOutput({n});
  acts->k_normed = Tensor::ForOutput({n, dim});
  backend.LayerNormForward(acts->k_raw.Matrix(), p.k_norm_weight.value.data(),
                           p.k_norm_bias.value.data(), kKNormEps,
                           acts->k_normed.Matrix(), acts->k_mean.data(),
                           acts->k_rstd.data());
  acts->k = Tensor::ForOutput({n, dim});
  ConstMatrixView k_normed = acts->k_normed.Matrix();
  backend.Copy(k_normed.Columns(rope, dim - rope),
               acts->k.Matrix().Columns(rope, dim - rope));
  backend.RopeForward(k_normed.Columns(0, rope), pos, 1, spec.rope_theta,
                      acts->k.Matrix().Columns(0, rope));
  if (parallel.cp() > 1)
    acts->k = parallel.GatherAll(acts->k.Matrix(), layout.tokens);
  // Head weights, scaled by heads^-0.5.
  Tensor raw_weights = Tensor::ForOutput({n, spec.heads});
  backend.Linear(x, p.weights_proj.value.Matrix(), raw_weights.Matrix(), false);
  acts->weights = Tensor({n, spec.heads});
  backend.Axpy(1.f / std::sqrt(static_cast<float>(spec.heads)),
               raw_weights.Matrix(), acts->weights.Matrix());

  // No query has more than max_seq_len causal keys.
  const int64_t width = std::min(spec.topk, layout.max_seq_len);
  // Each tensor rank selects for its own rows of the chunk (the quadratic
  // scoring is not repeated) and the ranks share the choices.
  const TokenRange mine = parallel.tp() > 1
                              ? parallel.LocalInChunk(layout.tokens)
                              : TokenRange{0, n};
  *topk = IndexTensor({mine.count, width}, -1);
  // One call per run of consecutive queries (two under context parallelism).
  const std::vector<TokenRange> runs = chunk.Sub(mine).runs;
  // The loss reads the same operands only where one call covers every row.
  const bool keep_for_loss =
      loss_follows && runs.size() == 1 && mine.count == n;
  int64_t row = mine.begin;
  for (const TokenRange& run : runs) {
    backend.IndexerTopK(
        acts->q.Matrix().Rows(row * spec.heads, run.count * spec.heads),
        acts->k.Matrix(), acts->weights.Matrix().Rows(row, run.count),
        layout.op_seq_start.data() + run.begin, run.begin, width,
        ScoreScale(spec), keep_for_loss ? &acts->kept_scores : nullptr,
        topk->data() + (row - mine.begin) * width);
    row += run.count;
  }
  if (parallel.tp() > 1) *topk = ShareTopK(parallel, *topk, layout.tokens);
}

void IndexerLossForward(Backend& backend, const IndexerSpec& spec,
                        const IndexTensor& topk, ConstMatrixView target,
                        float coeff, TokenRange rows, int64_t all_tokens,
                        const IndexerActivations& acts,
                        IndexerLossGradients* grads, double* sum) {
  assert(sum != nullptr);
  grads->dq = Tensor(acts.q.shape());
  grads->dk = Tensor(acts.k.shape());
  grads->dweights = Tensor(acts.weights.shape());
  const int64_t heads = spec.heads, width = topk.dim(1);
  // The kernel averages over its rows; the loss is a mean over all tokens.
  const float share =
      static_cast<float>(rows.count) / static_cast<float>(all_tokens);
  backend.IndexerKlLoss(
      acts.q.Matrix().Rows(rows.begin * heads, rows.count * heads),
      acts.k.Matrix(), acts.weights.Matrix().Rows(rows.begin, rows.count),
      topk.data() + rows.begin * width, width, ScoreScale(spec), target,
      coeff * share, &acts.kept_scores,
      grads->dq.Matrix().Rows(rows.begin * heads, rows.count * heads),
      grads->dk.Matrix(), grads->dweights.Matrix().Rows(rows.begin, rows.count),
      sum);
}

void IndexerBackward(Backend& backend, IndexerParameters& p,
                     const IndexerSpec& spec, ConstMatrixView x,
                     ConstMatrixView q_resid, const TokenLayout& layout,
                     const int32_t* pos, TokenParallel& parallel,
                     const IndexerActivations& acts,
                     const IndexerLossGradients& grads) {
  const int64_t n = x.rows, dim = spec.head_dim, rope = spec.rope_dim;
  const MatrixView no_input_grad;  // inputs are detached
  // Head weights.
  Tensor draw_weights({n, spec.heads});
  backend.Axpy(1.f / std::sqrt(static_cast<float>(spec.heads)),
               grads.dweights.Matrix(), draw_weights.Matrix());
  backend.LinearBackward(x, p.weights_proj.value.Matrix(),
                         draw_weights.Matrix(), no_input_grad,
                         p.weights_proj.grad.Matrix());
  // Queries.
  // Both column ranges written (Copy, RopeBackward): unfilled buffers.
  Tensor dq_raw = Tensor::ForOutput({n, spec.heads * dim});
  MatrixView dq_rows = dq_raw.Matrix().SplitRows(spec.heads);
  ConstMatrixView dq = grads.dq.Matrix();
  backend.Copy(dq.Columns(rope, dim - rope), dq_rows.Columns(rope, dim - rope));
  backend.RopeBackward(dq.Columns(0, rope), pos, spec.heads, spec.rope_theta,
                       dq_rows.Columns(0, rope));
  backend.LinearBackward(q_resid, p.wq_b.value.Matrix(), dq_raw.Matrix(),
                         no_input_grad, p.wq_b.grad.Matrix());
  // Keys: every chunk's queries chose among this chunk's keys.
  Tensor dk_normed = Tensor::ForOutput({n, dim}), dk_raw({n, dim});
  const Tensor dk_chunk =
      parallel.cp() > 1
          ? parallel.ReduceScatterAll(grads.dk.Matrix(), layout.tokens)
          : Tensor();
  ConstMatrixView dk =
      parallel.cp() > 1 ? dk_chunk.Matrix() : grads.dk.Matrix();
  backend.Copy(dk.Columns(rope, dim - rope),
               dk_normed.Matrix().Columns(rope, dim - rope));
  backend.RopeBackward(dk.Columns(0, rope), pos, 1, spec.rope_theta,
                       dk_normed.Matrix().Columns(0, rope));
  backend.LayerNormBackward(
      acts.k_raw.Matrix(), p.k_norm_weight.value.data(), acts.k_mean.data(),
      acts.k_rstd.data(), dk_normed.Matrix(), dk_raw.Matrix(),
      p.k_norm_weight.grad.data(), p.k_norm_bias.grad.data());
  backend.LinearBackward(x, p.wk.value.Matrix(), dk_raw.Matrix(), no_input_grad,
                         p.wk.grad.Matrix());
}

}  // namespace glm
