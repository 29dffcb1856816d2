// The DSA indexer of a computing layer: per-query top-k keys, and the KL loss
// that trains it (on detached inputs: its gradients reach only the indexer's
// own weights).
#ifndef GLM_MODEL_INDEXER_H_
#define GLM_MODEL_INDEXER_H_

#include <cstdint>

#include "kernels/backend.h"
#include "model/parameters.h"
#include "model/token_layout.h"

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
  Tensor k;         // [n, dim] after RoPE
  Tensor weights;   // [n, heads] weights_proj(x) * heads^-0.5
  // Gradients of the indexer loss w.r.t. q, k, weights (set by
  // IndexerLossForward).
  Tensor dq, dk, dweights;
};

// Computes the indexer activations and the top-k keys [n, topk] (-1 padded).
void IndexerForward(Backend& backend, const IndexerParameters& p,
                    const IndexerSpec& spec, ConstMatrixView x,
                    ConstMatrixView q_resid, const TokenLayout& layout,
                    IndexerActivations* acts, IndexTensor* topk);
// The KL loss against the main attention's probabilities [n * attn_heads,
// topk]; keeps its gradients in `acts` for IndexerBackward. Returns coeff *
// mean KL.
double IndexerLossForward(Backend& backend, const IndexerSpec& spec,
                          const IndexTensor& topk, ConstMatrixView attn_probs,
                          int64_t attn_heads, float coeff,
                          IndexerActivations* acts);
// Propagates the loss gradients into the indexer weights only.
void IndexerBackward(Backend& backend, IndexerParameters& p,
                     const IndexerSpec& spec, ConstMatrixView x,
                     ConstMatrixView q_resid, const TokenLayout& layout,
                     const IndexerActivations& acts);

}  // namespace glm

#endif  // GLM_MODEL_INDEXER_H_
