#include "training/flops.h"

#include "gtest/gtest.h"

namespace glm {
namespace {

// Small enough to count by hand: 2 layers (dense, then MoE), index sharing with
// layer 1 computing and layer 2 skipping, one MTP layer without its own
// indexer.
ModelConfig HandCountedConfig() {
  ModelConfig c;
  c.vocab_size = 10;
  c.hidden_size = 4;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.q_lora_rank = 3;
  c.kv_lora_rank = 2;
  c.qk_nope_head_dim = 2;
  c.qk_rope_head_dim = 2;
  c.v_head_dim = 3;
  c.intermediate_size = 5;
  c.first_k_dense_replace = 1;
  c.n_routed_experts = 4;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 2;
  c.index_n_heads = 2;
  c.index_head_dim = 2;
  c.index_topk = 2;
  c.index_sharing = IndexSharing{2, 1};
  c.num_mtp_layers = 1;
  return c;
}

TEST(FlopsTest, MatchesHandCount) {
  const ForwardMacs macs = ForwardMacsPerSequence(HandCountedConfig(), 3);
  // Per token: q_a 4*3 + q_b 3*2*4 + kv_a 4*4 + kv_b 2*2*5 + o 2*3*4 = 96;
  // 3 tokens, 2 layers.
  EXPECT_DOUBLE_EQ(macs.attention_projections, 576);
  // Selected keys min(2, t+1) for t = 0,1,2: 1+2+2 = 5; heads 2 x (qk 4 + v 3).
  EXPECT_DOUBLE_EQ(macs.attention_core, 140);
  // Layer 1 only: (3*2*2 + 4*2 + 4*2) * 3 tokens + 6 causal pairs * 2 heads
  // * 2.
  EXPECT_DOUBLE_EQ(macs.indexer, 108);
  // Dense 3*4*5 per token; MoE router 4*4 + (2 routed + 1 shared) * 3*4*2.
  EXPECT_DOUBLE_EQ(macs.mlp, 180 + 264);
  EXPECT_DOUBLE_EQ(macs.logits, 120);
  // eh_proj 2*4*4*3 + projections 288 + core 70 + MoE 264 + logits 120.
  EXPECT_DOUBLE_EQ(macs.mtp, 96 + 288 + 70 + 264 + 120);
  EXPECT_DOUBLE_EQ(TrainingFlops(HandCountedConfig(), 3, 2), 6.0 * 2226 * 2);
}

TEST(FlopsTest, SparseAttentionGrowsWithSeqTimesTopk) {
  ModelConfig c = HandCountedConfig();
  // Past index_topk, each new query adds exactly topk keys.
  const double at_100 = ForwardMacsPerSequence(c, 100).attention_core;
  const double at_101 = ForwardMacsPerSequence(c, 101).attention_core;
  EXPECT_DOUBLE_EQ(at_101 - at_100, 2 * 2 * 7 * 2);
}

TEST(FlopsTest, LayersAddUpToTheModel) {
  const ModelConfig c = HandCountedConfig();
  const ForwardMacs whole = ForwardMacsPerSequence(c, 3);
  double layers = 0;
  for (int layer = 1; layer <= c.num_hidden_layers; ++layer) {
    layers += DecoderLayerForwardMacs(c, layer, 3).Total();
  }
  EXPECT_DOUBLE_EQ(layers, whole.Total() - whole.logits - whole.mtp);
  // Layer 2 skips (no indexer), the MTP layer's decoder layer is MoE without
  // an indexer: 288 + 70 + 264 of the hand count above, per layer of 3 tokens.
  EXPECT_DOUBLE_EQ(DecoderLayerForwardMacs(c, 2, 3).indexer, 0);
  EXPECT_DOUBLE_EQ(DecoderLayerForwardMacs(c, 3, 3).Total(), 288 + 70 + 264);
}

}  // namespace
}  // namespace glm
