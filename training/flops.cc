#include "training/flops.h"

#include <algorithm>

namespace glm {
namespace {

double ProjectionMacsPerToken(const ModelConfig& c) {
  const double heads = c.num_attention_heads;
  return static_cast<double>(c.hidden_size) * c.q_lora_rank +
         c.q_lora_rank * heads * c.QkHeadDim() +
         static_cast<double>(c.hidden_size) *
             (c.kv_lora_rank + c.qk_rope_head_dim) +
         c.kv_lora_rank * heads * (c.qk_nope_head_dim + c.v_head_dim) +
         heads * c.v_head_dim * c.hidden_size;
}

// Keys attended over the whole sequence: sum over queries of min(topk, t + 1).
double SelectedKeys(const ModelConfig& c, int64_t seq) {
  double keys = 0;
  for (int64_t t = 0; t < seq; ++t)
    keys += std::min<int64_t>(c.index_topk, t + 1);
  return keys;
}

double AttentionCoreMacs(const ModelConfig& c, int64_t seq) {
  return c.num_attention_heads *
         static_cast<double>(c.QkHeadDim() + c.v_head_dim) *
         SelectedKeys(c, seq);
}

double IndexerMacs(const ModelConfig& c, int64_t seq) {
  const double per_token =
      static_cast<double>(c.q_lora_rank) * c.index_n_heads * c.index_head_dim +
      static_cast<double>(c.hidden_size) * c.index_head_dim +
      static_cast<double>(c.hidden_size) * c.index_n_heads;
  const double causal_pairs = seq * (seq + 1) / 2.0;
  return per_token * seq +
         causal_pairs * c.index_n_heads * static_cast<double>(c.index_head_dim);
}

double MlpMacsPerToken(const ModelConfig& c, bool moe) {
  const double h = c.hidden_size;
  if (!moe) return 3 * h * c.intermediate_size;
  return h * c.n_routed_experts + (c.num_experts_per_tok + c.n_shared_experts) *
                                      3 * h * c.moe_intermediate_size;
}

}  // namespace

ForwardMacs DecoderLayerForwardMacs(const ModelConfig& c, int layer,
                                    int64_t seq) {
  const bool mtp = layer > c.num_hidden_layers;
  // An MTP layer runs its own indexer only without index sharing (freq 1).
  const bool indexer = mtp ? c.index_sharing.topk_freq <= 1
                           : c.index_sharing.IsComputingLayer(layer);
  ForwardMacs macs;
  macs.attention_projections = ProjectionMacsPerToken(c) * seq;
  macs.attention_core = AttentionCoreMacs(c, seq);
  if (indexer) macs.indexer = IndexerMacs(c, seq);
  macs.mlp = MlpMacsPerToken(c, mtp || c.IsMoeLayer(layer)) * seq;
  return macs;
}

ForwardMacs ForwardMacsPerSequence(const ModelConfig& c, int64_t seq) {
  ForwardMacs macs;
  for (int layer = 1; layer <= c.num_hidden_layers; ++layer) {
    const ForwardMacs part = DecoderLayerForwardMacs(c, layer, seq);
    macs.attention_projections += part.attention_projections;
    macs.attention_core += part.attention_core;
    macs.indexer += part.indexer;
    macs.mlp += part.mlp;
  }
  macs.logits = static_cast<double>(c.hidden_size) * c.vocab_size * seq;
  for (int m = 1; m <= c.num_mtp_layers; ++m) {
    macs.mtp +=
        2.0 * c.hidden_size * c.hidden_size * seq +
        DecoderLayerForwardMacs(c, c.num_hidden_layers + m, seq).Total() +
        macs.logits;
  }
  return macs;
}

double TrainingFlops(const ModelConfig& config, int64_t seq_length,
                     int64_t sequences) {
  return 3.0 * 2.0 * ForwardMacsPerSequence(config, seq_length).Total() *
         sequences;
}

}  // namespace glm
