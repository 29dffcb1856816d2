// Multi-head Latent Attention with DeepSeek Sparse Attention and GLM-5.2 index
// sharing: a computing layer runs its indexer to choose each query's top-k
// keys; a skip layer attends over the top-k of its source layer.
#ifndef GLM_MODEL_MLA_ATTENTION_H_
#define GLM_MODEL_MLA_ATTENTION_H_

#include <cstdint>

#include "kernels/backend.h"
#include "model/config.h"
#include "model/indexer.h"
#include "model/parameters.h"
#include "model/token_layout.h"
#include "model/token_parallel.h"

namespace glm {

// AttentionSpec::latent_from's default, measured (bench/NOTES.md, run79 on
// an H100): a latent query costs about the same whatever the length (0.9 us
// a layer forward, 2.5-5.4 backward), a per-head one grows with its causal
// keys (cuDNN's masked kernels visit all of them). At 16k tokens from 8k on
// was 17% slower than the per-head form (run76's 998 ms a step); at 32k from
// 16k on was the fastest (3.46 s a step against 3.59 from 8k on and 5.26
// per-head).
inline constexpr int64_t kDefaultLatentAttentionFrom = 16384;

struct AttentionSpec {
  int64_t heads = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t nope_dim = 0;
  int64_t rope_dim = 0;
  int64_t v_dim = 0;
  float rope_theta = 10000.f;
  IndexerSpec indexer;
  // Indexer KL loss weight; 0 skips the loss (inference).
  float indexer_loss_coeff = 0.f;
  // Tensor and context parallelism (model/token_parallel.h); null: one rank.
  // Under tensor parallelism `heads` is this rank's share. Not owned.
  TokenParallel* parallel = nullptr;
  // Where the indexer KL loss is added (a LossSums slot, model/loss_sums.h),
  // set by the model for each pass that forms it; needed when
  // indexer_loss_coeff != 0.
  double* indexer_loss_sum = nullptr;
  // Which pass forms the indexer loss: the forward, its target the key
  // weights formed again from the queries and keys (SparseAttentionKeyWeights);
  // or the backward (for a step whose losses are read after it), its target
  // summed from the probabilities the attention's backward forms anyway (its
  // target is detached: the same loss and gradients). The forward then only
  // keeps what the loss reads.
  bool indexer_loss_in_backward = false;
  // The micro batch's queries from this row on attend in MLA's latent space
  // (Backend::LatentAttentionForward): each selected key's one latent row
  // serves every head, so a query costs top-k rows whatever the length, where
  // the per-head form's kernels pay for every causal pair. The queries before
  // it keep the per-head form. Taken on one rank without context or tensor
  // parallelism, and where the indexer loss is formed in the backward (or not
  // at all); 0: never.
  int64_t latent_from = kDefaultLatentAttentionFrom;

  int64_t qk_dim() const { return nope_dim + rope_dim; }
};

AttentionSpec MakeAttentionSpec(const ModelConfig& config,
                                float indexer_loss_coeff);

// n is the queries' tokens: the rank's context chunk (all tokens without
// context parallelism); keys and values cover all tokens.
struct AttentionActivations {
  Tensor x_chunk;        // the input gathered over the tensor group (tp > 1)
  Tensor q_a, q_a_rstd;  // [n, q_lora_rank]
  Tensor q_resid;        // RMSNorm(q_a)
  // [n * heads, qk]: q_b_proj(q_resid) per head, nope | RoPE(rope) (half
  // layout)
  Tensor query;
  // Keys and values of all N tokens:
  Tensor kv_a, kv_a_rstd;  // [N, kv_lora_rank + rope]
  Tensor latent;           // RMSNorm(kv_a latent part) [N, kv_lora_rank]
  // Of the first L tokens (the queries that keep the per-head form; L = N
  // without latent queries):
  Tensor kv;   // [L, heads * (nope + v)]
  Tensor key;  // [L * heads, qk]: k_nope | RoPE(k_rope) shared by heads
  // The latent queries' (tokens [L, n)):
  Tensor kv_latent;     // [N, kv_lora_rank + rope]: latent | RoPE(k_rope)
  Tensor query_latent;  // [(n - L) * heads, kv_lora_rank + rope]
  Tensor out_latent;    // [(n - L) * heads, kv_lora_rank]
  Tensor attn;          // [n, heads * v]
  Tensor lse;           // [n * heads]: log-sum-exp of each row's scores
  IndexerActivations indexer;
  IndexerLossGradients indexer_grads;  // where the forward formed the loss
  IndexTensor own_topk;  // computing layers: the keys this layer chose
  const IndexTensor* topk = nullptr;  // the keys attended (own or the source's)
};

// out = attention(x) (+ residual where given: F32, out's shape) for this
// rank's rows of the layout's tokens (all of them on one rank).
// `shared_topk` is the source layer's top-k on skip layers (and ignored on
// computing layers).
void AttentionForward(Backend& backend, const AttentionParameters& p,
                      const AttentionSpec& spec, ConstMatrixView x,
                      const TokenLayout& layout, const IndexTensor* shared_topk,
                      ConstMatrixView residual, MatrixView out,
                      AttentionActivations* acts);
// dx += ...; weight gradients accumulate. The indexer weights get the gradient
// of the indexer loss only.
void AttentionBackward(Backend& backend, AttentionParameters& p,
                       const AttentionSpec& spec, ConstMatrixView x,
                       const TokenLayout& layout,
                       const AttentionActivations& acts, ConstMatrixView dout,
                       MatrixView dx);

}  // namespace glm

#endif  // GLM_MODEL_MLA_ATTENTION_H_
