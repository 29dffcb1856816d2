// Model FLOPs of a training iteration, by Megatron's convention: every GEMM's
// multiply-adds count 2 FLOPs, and backward costs twice the forward, so
// training is 3 x 2 x MACs. Terms: MLA projections, sparse attention over the
// selected keys (min(index_topk, t + 1) per query), the DSA indexer on
// computing layers (its projections plus dense causal scoring, which is
// quadratic in sequence length), dense MLP or MoE (router, top-k routed and
// shared experts), the logits, and the MTP layers (eh_proj, a decoder layer,
// their logits).
#ifndef GLM_TRAINING_FLOPS_H_
#define GLM_TRAINING_FLOPS_H_

#include <cstdint>

#include "model/config.h"

namespace glm {

// Forward multiply-accumulates of one sequence of `seq_length` tokens, broken
// down.
struct ForwardMacs {
  double attention_projections = 0;
  double attention_core = 0;
  double indexer = 0;
  double mlp = 0;
  double logits = 0;
  double mtp = 0;

  double Total() const {
    return attention_projections + attention_core + indexer + mlp + logits +
           mtp;
  }
};

ForwardMacs ForwardMacsPerSequence(const ModelConfig& config,
                                   int64_t seq_length);

// One decoder layer's part of it (1-indexed `layer`; attention_projections,
// attention_core, indexer and mlp set): what a pipeline stage holding the
// layer computes. Layers past num_hidden_layers are MTP layers' decoder
// layers (MoE, with an indexer only without index sharing).
ForwardMacs DecoderLayerForwardMacs(const ModelConfig& config, int layer,
                                    int64_t seq_length);

// 3 x 2 x forward MACs, for `sequences` sequences.
double TrainingFlops(const ModelConfig& config, int64_t seq_length,
                     int64_t sequences);

}  // namespace glm

#endif  // GLM_TRAINING_FLOPS_H_
