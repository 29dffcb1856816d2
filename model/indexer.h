// The DSA indexer of a computing layer: per-query top-k keys, and the KL loss
// that trains it (on detached inputs: its gradients reach only the indexer's
// own weights).
#ifndef GLM_MODEL_INDEXER_H_
#define GLM_MODEL_INDEXER_H_

#include <cstdint>

#include "kernels/backend.h"
#include "model/parameters.h"
#include "model/token_layout.h"
#include "model/token_parallel.h"

namespace glm {

struct IndexerSpec {
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t rope_dim = 0;
  int64_t topk = 0;  // index_topk
  float rope_theta = 10000.f;
};

struct IndexerActivations {
  Tensor q_raw;  // [n, heads * dim] wq_b(q_resid)
  Tensor q;      // [n * heads, dim] after RoPE on the first rope_dim
  Tensor k_raw;  // [n, dim] wk(x)
  Tensor k_mean, k_rstd;
  Tensor k_normed;  // [n, dim] LayerNorm(k_raw)
  Tensor k;  // after RoPE: [n, dim], or every chunk's [all tokens, dim] under
             // context parallelism
  Tensor weights;  // [n, heads] weights_proj(x) * heads^-0.5
  // The top-k call's scores, where the backend keeps them for the loss.
  KeptIndexerScores kept_scores;
};

// Gradients of the indexer loss w.r.t. q, k and weights (IndexerLossForward),
// which IndexerBackward takes into the indexer's weights.
struct IndexerLossGradients {
  Tensor dq, dk, dweights;
};

// x and q_resid are the n tokens of `chunk` (all tokens without context
// parallelism), `positions` theirs. Computes the indexer activations and
// their top-k keys [n, topk] (-1 padded) among all tokens of the layout.
// loss_follows: IndexerLossForward runs over all n rows, with these
// activations unchanged (where one call selects every row, the backend may
// keep its scores for the loss in acts->kept_scores:
// Backend::IndexerTopK).
void IndexerForward(Backend& backend, const IndexerParameters& p,
                    const IndexerSpec& spec, ConstMatrixView x,
                    ConstMatrixView q_resid, const TokenLayout& layout,
                    const TokenRows& chunk, const int32_t* positions,
                    TokenParallel& parallel, bool loss_follows,
                    IndexerActivations* acts, IndexTensor* topk);
// The KL loss of the chunk's queries `rows` (chunk-relative) against the
// attention each of their selected keys receives, summed over the main
// attention's heads [rows.count, topk]; writes its gradients to *grads for
// IndexerBackward. Adds coeff * the rows' part of the mean KL over all tokens
// of the layout to *sum (in the backend's memory).
void IndexerLossForward(Backend& backend, const IndexerSpec& spec,
                        const IndexTensor& topk, ConstMatrixView target,
                        float coeff, TokenRange rows, int64_t all_tokens,
                        const IndexerActivations& acts,
                        IndexerLossGradients* grads, double* sum);
// Propagates the loss gradients into the indexer weights only.
void IndexerBackward(Backend& backend, IndexerParameters& p,
                     const IndexerSpec& spec, ConstMatrixView x,
                     ConstMatrixView q_resid, const TokenLayout& layout,
                     const int32_t* positions, TokenParallel& parallel,
                     const IndexerActivations& acts,
                     const IndexerLossGradients& grads);

}  // namespace glm

#endif  // GLM_MODEL_INDEXER_H_
