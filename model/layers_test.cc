// Finite-difference gradient checks of every layer kind on tiny random shapes
// (float forward, directional central differences, step 5e-3, relative
// tolerance 2e-2; a direction whose probes change the top-k keys or the
// routing is retried at smaller steps, model/test_model_util.h).
#include <algorithm>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/decoder_layer.h"
#include "model/dense_mlp.h"
#include "model/mla_attention.h"
#include "model/moe.h"
#include "model/mtp_layer.h"
#include "model/parameters.h"
#include "model/test_model_util.h"
#include "model/token_layout.h"

namespace glm {
namespace {

constexpr double kStep = 5e-3;
// The index scores sum ReLUs; a smaller step keeps the perturbation off their
// kinks.
constexpr double kIndexerStep = 1e-3;
constexpr double kTol = 2e-2;
// The MoE's loss sums its experts' rows, each a product over the hidden
// size: on CPUs whose BLAS orders those sums otherwise (AVX-512 kernels) its
// rounding reaches about 1e-5, which a 5e-3 step turns into a 5% error on
// the experts' gate_up direction; at 2e-2 the estimate stays inside kTol
// and the routing decisions still hold (steps shrink where they flip).
constexpr double kMoeStep = 2e-2;
constexpr double kAbsTol = 1e-6;

// sum(out . r) in double.
double Project(ConstMatrixView out, const Tensor& r) {
  double total = 0;
  for (int64_t i = 0; i < out.rows; ++i)
    for (int64_t c = 0; c < out.cols; ++c)
      total += double{out.Row(i)[c]} * r.data()[i * out.cols + c];
  return total;
}

// Each query's key set, order ignored (the losses do not depend on the order).
std::vector<std::vector<int32_t>> KeySets(const IndexTensor& keys) {
  std::vector<std::vector<int32_t>> sets;
  for (int64_t t = 0; t < keys.dim(0); ++t) {
    sets.emplace_back(keys.data() + t * keys.dim(1),
                      keys.data() + (t + 1) * keys.dim(1));
    std::sort(sets.back().begin(), sets.back().end());
  }
  return sets;
}

GradientTarget Target(const std::string& name, Parameter& p) {
  return {name, &p.value, &p.grad};
}

class LayersTest : public ::testing::Test {
 protected:
  LayersTest() : config_(TinyTestConfig()), params_(config_) {
    params_.InitRandom(/*seed=*/5, /*std=*/0.3f);
    // Two packed sequences of 5 and 4 tokens.
    layout_ = *MakeTokenLayout(kTokens, {0, 5, kTokens});
    x_ = RandomTensor({kTokens, config_.hidden_size}, rng_);
    dx_ = Tensor(x_.shape());
    r_ = RandomTensor({kTokens, config_.hidden_size}, rng_);
  }

  // Every MLA weight (the indexer's aside) and the input.
  std::vector<GradientTarget> MlaTargets(AttentionParameters& p) {
    return {Target("q_a_proj", p.q_a_proj),
            Target("q_a_layernorm", p.q_a_layernorm),
            Target("q_b_proj", p.q_b_proj),
            Target("kv_a_proj_with_mqa", p.kv_a_proj_with_mqa),
            Target("kv_a_layernorm", p.kv_a_layernorm),
            Target("kv_b_proj", p.kv_b_proj),
            Target("o_proj", p.o_proj),
            {"x", &x_, &dx_}};
  }

  static constexpr int64_t kTokens = 9;
  std::mt19937 rng_{3};
  CpuBackend backend_;
  ModelConfig config_;
  ModelParameters params_;
  TokenLayout layout_;
  Tensor x_, dx_, r_;
};

TEST_F(LayersTest, DenseMlpGradients) {
  MlpParameters& p = params_.layers[0].mlp;
  auto loss = [&] {
    Tensor out(x_.shape());
    MlpActivations acts;
    MlpForward(backend_, p, x_.Matrix(), {}, out.Matrix(), &acts);
    return Project(out.Matrix(), r_);
  };
  Tensor out(x_.shape());
  MlpActivations acts;
  MlpForward(backend_, p, x_.Matrix(), {}, out.Matrix(), &acts);
  MlpBackward(backend_, p, x_.Matrix(), acts, r_.Matrix(), dx_.Matrix());
  ExpectDirectionalGradients(loss,
                             {Target("gate_proj", p.gate_proj),
                              Target("up_proj", p.up_proj),
                              Target("down_proj", p.down_proj),
                              {"x", &x_, &dx_}},
                             kStep);
}

TEST_F(LayersTest, MoeGradientsThroughRouterExpertsAndSharedExpert) {
  MoeParameters& p = params_.layers[1].moe;
  p.e_score_correction_bias =
      RandomTensor({config_.n_routed_experts}, rng_, 0.1f);
  const RouterSpec spec = MakeRouterSpec(config_);
  MoeActivations acts;
  auto run = [&](MoeActivations* a) {
    Tensor out(x_.shape());
    MoeForward(backend_, p, spec, x_.Matrix(), out.Matrix(), a);
    return Project(out.Matrix(), r_);
  };
  run(&acts);
  int64_t routed = 0;
  for (int64_t load : ExpertLoad(acts)) routed += load;
  EXPECT_EQ(routed, kTokens * config_.num_experts_per_tok);
  // n_group 2, topk_group 1: both choices of a token come from one group.
  for (int64_t t = 0; t < kTokens; ++t) {
    EXPECT_EQ(acts.choice.data()[2 * t] / 2, acts.choice.data()[2 * t + 1] / 2)
        << "token " << t;
  }
  MoeBackward(backend_, p, spec, x_.Matrix(), acts, r_.Matrix(), dx_.Matrix());
  const std::vector<int32_t> choice = acts.choice.values();
  std::vector<int32_t> last;
  auto loss = [&] {
    MoeActivations a;
    const double value = run(&a);
    last = a.choice.values();
    return value;
  };
  ExpectDirectionalGradients(
      loss,
      {Target("gate", p.gate),
       Target("experts.gate_up_proj", p.experts_gate_up),
       Target("experts.down_proj", p.experts_down),
       Target("shared.gate_proj", p.shared_experts.gate_proj),
       Target("shared.up_proj", p.shared_experts.up_proj),
       Target("shared.down_proj", p.shared_experts.down_proj),
       {"x", &x_, &dx_}},
      kMoeStep, kTol, kAbsTol, [&] { return last == choice; });
}

// The routed experts a chunk of tokens at a time (ExpertChunking): a block of
// grouped rows a chunk, its expert rows kept, or with `recompute` dropped
// after the forward and formed again in the backward, bitwise the same
// gradients either way.
TEST_F(LayersTest, MoeChunksKeepOrRecomputeTheirExpertRows) {
  MoeParameters& p = params_.layers[1].moe;
  const RouterSpec spec = MakeRouterSpec(config_);
  auto run = [&](const ExpertChunking& chunking, MoeActivations* acts) {
    p.experts_gate_up.grad.SetZero();
    p.experts_down.grad.SetZero();
    p.gate.grad.SetZero();
    Tensor out(x_.shape()), dx(x_.shape());
    MoeForward(backend_, p, spec, x_.Matrix(), out.Matrix(), acts, chunking);
    MoeBackward(backend_, p, spec, x_.Matrix(), *acts, r_.Matrix(), dx.Matrix(),
                chunking);
    return std::vector<std::vector<float>>{
        out.HostValues(), dx.HostValues(), p.experts_gate_up.grad.HostValues(),
        p.experts_down.grad.HostValues(), p.gate.grad.HostValues()};
  };
  const int64_t chunk = kTokens / 2 - 1;  // two chunks and a short third
  MoeActivations kept, recomputed;
  const auto want = run({chunk, false}, &kept);
  const auto got = run({chunk, true}, &recomputed);
  ASSERT_EQ(kept.routed.experts.size(), 3u);
  ASSERT_EQ(recomputed.routed.experts.size(), 3u);
  for (size_t c = 0; c < 3; ++c) {
    EXPECT_FALSE(kept.routed.experts[c].inputs.empty()) << "chunk " << c;
    EXPECT_TRUE(recomputed.routed.experts[c].inputs.empty()) << "chunk " << c;
    EXPECT_TRUE(recomputed.routed.experts[c].mlp.gate_up.empty());
    EXPECT_TRUE(recomputed.routed.experts[c].out.empty());
  }
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(got[i] == want[i]) << "output " << i;
  // The layer's loads are the chunks' groupings summed: no grouping of the
  // whole micro batch beside them.
  MoeActivations whole;
  run({0, false}, &whole);
  EXPECT_EQ(whole.expert_offsets.size(), 1u);
  EXPECT_EQ(kept.expert_offsets.size(), 3u);
  EXPECT_EQ(ExpertLoad(kept), ExpertLoad(whole));
  EXPECT_EQ(ExpertLoad(recomputed), ExpertLoad(whole));
}

// Attention of a computing layer (indexer loss off): gradients of every MLA
// weight and of the input, over two packed sequences.
TEST_F(LayersTest, AttentionOnComputingLayerGradients) {
  AttentionParameters& p = params_.layers[1].self_attn;
  ASSERT_TRUE(p.has_indexer);
  const AttentionSpec spec = MakeAttentionSpec(config_, 0.f);
  AttentionActivations acts;
  Tensor out(x_.shape());
  AttentionForward(backend_, p, spec, x_.Matrix(), layout_, nullptr, {},
                   out.Matrix(), &acts);
  // Keys are causal, inside the query's own sequence, and as many as allowed.
  const IndexTensor& keys = acts.own_topk;
  ASSERT_EQ(keys.dim(1), config_.index_topk);
  for (int64_t t = 0; t < kTokens; ++t) {
    const int64_t allowed =
        std::min<int64_t>(config_.index_topk, t - layout_.seq_start[t] + 1);
    for (int64_t j = 0; j < keys.dim(1); ++j) {
      const int32_t key = keys.data()[t * keys.dim(1) + j];
      if (j >= allowed) {
        EXPECT_EQ(key, -1);
        continue;
      }
      EXPECT_GE(key, layout_.seq_start[t]);
      EXPECT_LE(key, t);
    }
  }
  AttentionBackward(backend_, p, spec, x_.Matrix(), layout_, acts, r_.Matrix(),
                    dx_.Matrix());
  const std::vector<std::vector<int32_t>> key_sets = KeySets(keys);
  std::vector<std::vector<int32_t>> last;
  auto loss = [&] {
    AttentionActivations a;
    Tensor o(x_.shape());
    AttentionForward(backend_, p, spec, x_.Matrix(), layout_, nullptr, {},
                     o.Matrix(), &a);
    last = KeySets(a.own_topk);
    return Project(o.Matrix(), r_);
  };
  ExpectDirectionalGradients(loss, MlaTargets(p), kStep, kTol, kAbsTol,
                             [&] { return last == key_sets; });
  // Without the indexer loss, the indexer learns nothing.
  for (float g : p.indexer.wq_b.grad.HostValues()) ASSERT_EQ(g, 0.f);
}

// A skip layer attends over the keys its source layer chose.
TEST_F(LayersTest, AttentionOnSkipLayerUsesSourceKeysAndGradients) {
  const AttentionSpec spec = MakeAttentionSpec(config_, 0.f);
  AttentionActivations source;
  Tensor source_out(x_.shape());
  AttentionForward(backend_, params_.layers[1].self_attn, spec, x_.Matrix(),
                   layout_, nullptr, {}, source_out.Matrix(), &source);
  AttentionParameters& p = params_.layers[2].self_attn;
  ASSERT_FALSE(p.has_indexer);
  AttentionActivations acts;
  Tensor out(x_.shape());
  AttentionForward(backend_, p, spec, x_.Matrix(), layout_, &source.own_topk,
                   {}, out.Matrix(), &acts);
  EXPECT_EQ(acts.topk, &source.own_topk);
  AttentionBackward(backend_, p, spec, x_.Matrix(), layout_, acts, r_.Matrix(),
                    dx_.Matrix());
  auto loss = [&] {
    AttentionActivations a;
    Tensor o(x_.shape());
    AttentionForward(backend_, p, spec, x_.Matrix(), layout_, &source.own_topk,
                     {}, o.Matrix(), &a);
    return Project(o.Matrix(), r_);
  };
  ExpectDirectionalGradients(loss, MlaTargets(p), kStep);
}

// The indexer KL loss trains the indexer weights only; its inputs are detached.
TEST_F(LayersTest, IndexerLossGradientsReachOnlyIndexerWeights) {
  AttentionParameters& p = params_.layers[1].self_attn;
  double indexer_loss = 0;
  AttentionSpec spec = MakeAttentionSpec(config_, 1.f);
  spec.indexer_loss_sum = &indexer_loss;
  AttentionActivations acts;
  Tensor out(x_.shape());
  AttentionForward(backend_, p, spec, x_.Matrix(), layout_, nullptr, {},
                   out.Matrix(), &acts);
  EXPECT_GT(indexer_loss, 0.0);
  const Tensor zero_dout(x_.shape());
  AttentionBackward(backend_, p, spec, x_.Matrix(), layout_, acts,
                    zero_dout.Matrix(), dx_.Matrix());
  for (float g : dx_.values()) ASSERT_EQ(g, 0.f);
  for (float g : p.q_a_proj.grad.HostValues()) ASSERT_EQ(g, 0.f);
  const std::vector<std::vector<int32_t>> keys = KeySets(acts.own_topk);
  std::vector<std::vector<int32_t>> last;
  auto loss = [&] {
    AttentionActivations a;
    Tensor o(x_.shape());
    indexer_loss = 0;
    AttentionForward(backend_, p, spec, x_.Matrix(), layout_, nullptr, {},
                     o.Matrix(), &a);
    last = KeySets(a.own_topk);
    return indexer_loss;
  };
  IndexerParameters& i = p.indexer;
  ExpectDirectionalGradients(loss,
                             {Target("wq_b", i.wq_b), Target("wk", i.wk),
                              Target("k_norm.weight", i.k_norm_weight),
                              Target("k_norm.bias", i.k_norm_bias),
                              Target("weights_proj", i.weights_proj)},
                             kIndexerStep, kTol, kAbsTol,
                             [&] { return last == keys; });
}

TEST_F(LayersTest, MtpLayerGradients) {
  const DecoderLayerSpec spec =
      MakeDecoderLayerSpec(config_, 0.f, kDefaultLatentAttentionFrom, {});
  // Keys of a computing layer, as the main model's last top-k would be.
  AttentionActivations source;
  Tensor source_out(x_.shape());
  AttentionForward(backend_, params_.layers[1].self_attn, spec.attention,
                   x_.Matrix(), layout_, nullptr, {}, source_out.Matrix(),
                   &source);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < kTokens; ++t)
    ids.push_back(static_cast<int32_t>((7 * t + 3) % config_.vocab_size));
  MtpParameters& p = params_.mtp[0];
  ASSERT_FALSE(p.layer.self_attn.has_indexer);
  // The layer ends at lm_head's input (the head's loss is the output head's).
  const Tensor r = RandomTensor({kTokens, config_.hidden_size}, rng_);
  auto run = [&](MtpActivations* acts) {
    MtpForward(backend_, p, params_.embed_tokens, spec,
               IndexTensor::FromHost(NextTokenIds(ids, layout_)), layout_,
               x_.Matrix(), &source.own_topk, acts);
    return Project(acts->head_in.Matrix(), r);
  };
  MtpActivations acts;
  run(&acts);
  // Token t+1 of the same sequence, 0 at each sequence's end.
  EXPECT_EQ(acts.next_ids.values()[4], 0);
  EXPECT_EQ(acts.next_ids.values()[3], ids[4]);
  EXPECT_EQ(acts.next_ids.values()[8], 0);
  MtpBackward(backend_, p, params_.embed_tokens, spec, layout_, x_.Matrix(),
              acts, r.Matrix(), dx_.Matrix());
  auto loss = [&] {
    MtpActivations a;
    return run(&a);
  };
  ExpectDirectionalGradients(
      loss,
      {Target("enorm", p.enorm),
       Target("hnorm", p.hnorm),
       Target("eh_proj", p.eh_proj),
       Target("shared_head.norm", p.shared_head_norm),
       Target("input_layernorm", p.layer.input_layernorm),
       Target("post_attention_layernorm", p.layer.post_attention_layernorm),
       Target("self_attn.q_b_proj", p.layer.self_attn.q_b_proj),
       Target("mlp.gate", p.layer.moe.gate),
       Target("embed_tokens", params_.embed_tokens),
       {"h_main", &x_, &dx_}},
      kStep);
}

}  // namespace
}  // namespace glm
