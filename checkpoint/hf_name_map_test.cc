#include "checkpoint/hf_name_map.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_test_util.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(HfNameMapTest, IndexerOnlyOnComputingLayers) {
  const HfNameMap map =
      TinyNameMap(ExpertForm::kPerExpert, PipelineExpertLayout(1, 1));
  for (int index : {0, 1, 2, 6}) {
    EXPECT_NE(map.Find(absl::StrCat("model.layers.", index,
                                    ".self_attn.indexer.k_norm.bias")),
              nullptr)
        << index;
  }
  for (int index : {3, 4, 5, 7}) {
    EXPECT_EQ(map.Find(absl::StrCat("model.layers.", index,
                                    ".self_attn.indexer.wq_b.weight")),
              nullptr)
        << index;
  }
  const HfTensor* wq_b =
      map.Find("model.layers.6.self_attn.indexer.wq_b.weight");
  ASSERT_NE(wq_b, nullptr);
  EXPECT_EQ(wq_b->shape, (std::vector<int64_t>{4 * 16, 32}));
}

TEST(HfNameMapTest, DenseAndMoeLayersAndMtp) {
  const HfNameMap map =
      TinyNameMap(ExpertForm::kPerExpert, PipelineExpertLayout(1, 1));
  EXPECT_NE(map.Find("model.layers.0.mlp.gate_proj.weight"), nullptr);
  EXPECT_EQ(map.Find("model.layers.0.mlp.gate.weight"), nullptr);
  const HfTensor* down =
      map.Find("model.layers.1.mlp.experts.7.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(down->expert, 7);
  EXPECT_EQ(map.Find("model.layers.1.mlp.experts.8.down_proj.weight"), nullptr);
  EXPECT_EQ(map.Find("model.layers.1.mlp.experts.gate_up_proj"), nullptr);
  const HfTensor* eh_proj = map.Find("model.layers.8.eh_proj.weight");
  ASSERT_NE(eh_proj, nullptr);
  EXPECT_EQ(eh_proj->shape, (std::vector<int64_t>{64, 128}));
  EXPECT_NE(map.Find("model.layers.8.shared_head.norm.weight"), nullptr);
  EXPECT_NE(map.Find("model.layers.8.mlp.experts.0.up_proj.weight"), nullptr);
  const HfTensor* extra = map.Find("model.layers.8.shared_head.head.weight");
  ASSERT_NE(extra, nullptr);
  EXPECT_FALSE(extra->required);
  EXPECT_EQ(map.Find("model.layers.9.enorm.weight"), nullptr);
  EXPECT_NE(map.Find("lm_head.weight"), nullptr);
  EXPECT_NE(map.Find("model.norm.weight"), nullptr);

  std::set<std::string> names;
  for (const HfTensor& tensor : map.tensors()) {
    EXPECT_TRUE(names.insert(tensor.name).second) << tensor.name;
  }
}

TEST(HfNameMapTest, FusedExperts) {
  const HfNameMap map =
      TinyNameMap(ExpertForm::kFused, PipelineExpertLayout(1, 1));
  const HfTensor* gate_up = map.Find("model.layers.1.mlp.experts.gate_up_proj");
  ASSERT_NE(gate_up, nullptr);
  EXPECT_EQ(gate_up->shape, (std::vector<int64_t>{8, 64, 64}));
  EXPECT_TRUE(gate_up->fused_experts);
  const HfTensor* down = map.Find("model.layers.8.mlp.experts.down_proj");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{8, 64, 32}));
  EXPECT_EQ(map.Find("model.layers.1.mlp.experts.0.gate_proj.weight"), nullptr);
}

// With index sharing the MTP layer (index 8) runs no indexer of its own, but
// released GLM-5.2 checkpoints carry one: it is optional and carried through.
TEST(HfNameMapTest, MtpIndexerIsOptionalWithIndexSharing) {
  const HfNameMap map =
      TinyNameMap(ExpertForm::kPerExpert, PipelineExpertLayout(1, 1));
  for (const char* name : {"wq_b.weight", "wk.weight", "k_norm.weight",
                           "k_norm.bias", "weights_proj.weight"}) {
    const HfTensor* tensor =
        map.Find(absl::StrCat("model.layers.8.self_attn.indexer.", name));
    ASSERT_NE(tensor, nullptr) << name;
    EXPECT_FALSE(tensor->required) << name;
  }
  EXPECT_TRUE(map.Find("model.layers.6.self_attn.indexer.wk.weight")->required);
}

TEST(HfNameMapTest, MtpLayerComputesWhenEveryLayerDoes) {
  ModelConfig config = *PresetConfig("glm5-tiny");
  absl::StatusOr<HfNameMap> map = HfNameMap::Create(
      config, ExpertForm::kPerExpert, PipelineExpertLayout(1, 1));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_TRUE(
      map->Find("model.layers.8.self_attn.indexer.wk.weight")->required);
  EXPECT_NE(map->Find("model.layers.3.self_attn.indexer.wk.weight"), nullptr);
}

TEST(HfNameMapTest, PipelineOwners) {
  // Stage 1 starts on layer 7, a computing layer.
  const HfNameMap map = TinyNameMap(ExpertForm::kPerExpert,
                                    PipelineExpertLayout(2, 1, "Etttttt|ttmL"));
  EXPECT_EQ(map.Find("model.embed_tokens.weight")->pp_rank, 0);
  EXPECT_EQ(map.Find("model.layers.5.input_layernorm.weight")->pp_rank, 0);
  EXPECT_EQ(map.Find("model.layers.6.input_layernorm.weight")->pp_rank, 1);
  EXPECT_EQ(map.Find("model.layers.8.enorm.weight")->pp_rank, 1);
  EXPECT_EQ(map.Find("lm_head.weight")->pp_rank, 1);
  EXPECT_EQ(map.world_size(), 2);
  EXPECT_TRUE(map.Writes("model.embed_tokens.weight", 0));
  EXPECT_FALSE(map.Writes("model.embed_tokens.weight", 1));
  EXPECT_TRUE(map.Writes("exp_avg/lm_head.weight", 1));
  EXPECT_FALSE(map.Writes("exp_avg/lm_head.weight", 0));
}

TEST(HfNameMapTest, InvalidLayoutIsAnError) {
  // Stage 1 would start on layer 5, a skip layer.
  absl::StatusOr<HfNameMap> map =
      HfNameMap::Create(*PresetConfig("glm5.2-tiny"), ExpertForm::kPerExpert,
                        PipelineExpertLayout(2, 1, "Etttt|ttttmL"));
  EXPECT_FALSE(map.ok());
}

TEST(HfNameMapTest, ExpertParallelOwners) {
  // PP2 x EP2: world 4, dense tensors have a second data-parallel replica.
  const HfNameMap per_expert = TinyNameMap(
      ExpertForm::kPerExpert, PipelineExpertLayout(2, 2, "Etttttt|ttmL"));
  ASSERT_EQ(per_expert.world_size(), 4);
  const std::string expert5 = "model.layers.1.mlp.experts.5.up_proj.weight";
  const std::string expert1 = "model.layers.1.mlp.experts.1.up_proj.weight";
  int writers5 = 0, writers1 = 0, gate_writers = 0;
  for (int rank = 0; rank < 4; ++rank) {
    writers5 += per_expert.Writes(expert5, rank);
    writers1 += per_expert.Writes(expert1, rank);
    gate_writers += per_expert.Writes("model.layers.1.mlp.gate.weight", rank);
    if (per_expert.Writes(expert5, rank)) {
      EXPECT_EQ(per_expert.coordinates(rank).ep, 1);
      EXPECT_EQ(per_expert.coordinates(rank).pp, 0);
    }
    if (per_expert.Writes(expert1, rank)) {
      EXPECT_EQ(per_expert.coordinates(rank).ep, 0);
    }
  }
  EXPECT_EQ(writers5, 1);
  EXPECT_EQ(writers1, 1);
  EXPECT_EQ(gate_writers, 1);

  const HfNameMap fused = TinyNameMap(
      ExpertForm::kFused, PipelineExpertLayout(2, 2, "Etttttt|ttmL"));
  const std::string name = "model.layers.8.mlp.experts.gate_up_proj";
  std::set<int64_t> begins;
  for (int rank = 0; rank < 4; ++rank) {
    if (!fused.Writes(name, rank)) continue;
    EXPECT_EQ(fused.coordinates(rank).pp, 1);
    const RowRange rows = fused.RowsHeld(name, rank, 8);
    EXPECT_EQ(rows.end - rows.begin, 4);
    EXPECT_EQ(rows.begin, 4 * fused.coordinates(rank).ep);
    begins.insert(rows.begin);
  }
  EXPECT_EQ(begins, (std::set<int64_t>{0, 4}));
  EXPECT_EQ(fused.RowsHeld("exp_avg/" + name, 3, 8),
            fused.RowsHeld(name, 3, 8));
  EXPECT_EQ(fused.RowsHeld("model.norm.weight", 3, 64), (RowRange{0, 64}));
}

}  // namespace
}  // namespace glm
