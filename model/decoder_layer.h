// One decoder layer: h += attn(rmsnorm(h)); h += mlp(rmsnorm(h)), the MLP dense
// or MoE.
#ifndef GLM_MODEL_DECODER_LAYER_H_
#define GLM_MODEL_DECODER_LAYER_H_

#include "kernels/backend.h"
#include "model/dense_mlp.h"
#include "model/mla_attention.h"
#include "model/moe.h"
#include "model/parameters.h"
#include "model/token_layout.h"

namespace glm {

struct DecoderLayerSpec {
  float rms_norm_eps = 1e-5f;
  AttentionSpec attention;
  RouterSpec router;
  // Where the routed experts run (expert parallelism); null: all of them in
  // this process, long micro batches in chunks (expert_chunking).
  // Not owned.
  ExpertDispatcher* experts = nullptr;
  ExpertChunking expert_chunking;
};

// latent_attention_from: AttentionSpec::latent_from.
DecoderLayerSpec MakeDecoderLayerSpec(const ModelConfig& config,
                                      float indexer_loss_coeff,
                                      int64_t latent_attention_from,
                                      const ExpertChunking& expert_chunking);

// A copy of a model's `spec` for one pass, its indexer loss formed in the
// backward or the forward (AttentionSpec::indexer_loss_in_backward) and added
// to `indexer_loss_sum` (a LossSums slot, model/loss_sums.h) by the pass that
// forms it: the model passes the copy down and keeps its own spec as built.
DecoderLayerSpec WithIndexerLoss(const DecoderLayerSpec& spec,
                                 double* indexer_loss_sum, bool in_backward);

struct DecoderLayerActivations {
  Tensor attn_in, attn_rstd;  // rmsnorm(h_in)
  AttentionActivations attn;
  Tensor h_mid;             // h_in + attention
  Tensor mlp_in, mlp_rstd;  // rmsnorm(h_mid)
  MlpActivations mlp;       // dense layers
  Tensor mlp_chunk_in;      // mlp_in gathered over the tensor group (tp > 1)
  MoeActivations moe;       // MoE layers
};

void DecoderLayerForward(Backend& backend, const DecoderLayerParameters& p,
                         const DecoderLayerSpec& spec, ConstMatrixView h_in,
                         const TokenLayout& layout,
                         const IndexTensor* shared_topk, MatrixView h_out,
                         DecoderLayerActivations* acts);
// dh_in = d(h_out)/d(h_in)^T dh_out, written (dh_in may start unfilled);
// weight gradients accumulate.
void DecoderLayerBackward(Backend& backend, DecoderLayerParameters& p,
                          const DecoderLayerSpec& spec, ConstMatrixView h_in,
                          const TokenLayout& layout,
                          const DecoderLayerActivations& acts,
                          ConstMatrixView dh_out, MatrixView dh_in);
// The same for a layer whose activations nothing reads after its backward:
// frees what only the MLP half reads (the MLP's or MoE's activations, its
// input and norm statistics, the attention's residual sum) before the
// attention's backward, whose peak then holds none of them.
void DecoderLayerBackward(Backend& backend, DecoderLayerParameters& p,
                          const DecoderLayerSpec& spec, ConstMatrixView h_in,
                          const TokenLayout& layout,
                          DecoderLayerActivations* acts, ConstMatrixView dh_out,
                          MatrixView dh_in);

}  // namespace glm

#endif  // GLM_MODEL_DECODER_LAYER_H_
