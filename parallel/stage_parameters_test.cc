#include "parallel/stage_parameters.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/pipeline_test_util.h"

namespace glm {
namespace {

std::vector<StageSlice> Plan(const ModelConfig& config,
                             const std::string& layout, int pp) {
  absl::StatusOr<std::vector<StageSlice>> plan =
      PlanForModel(config, layout, pp);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : std::vector<StageSlice>();
}

bool StartsWith(const std::string& name, const std::string& prefix) {
  return name.compare(0, prefix.size(), prefix) == 0;
}

// Every tensor is owned by exactly one pp rank and used where owned.
void ExpectPartition(ModelParameters& params,
                     const std::vector<StageSlice>& plan, int pp) {
  std::vector<PipelineTensors> ranks;
  for (int rank = 0; rank < pp; ++rank) {
    ranks.push_back(PipelineTensorsOf(params, plan, rank));
  }
  for (const NamedTensor& tensor : params.Named()) {
    int owners = 0;
    for (const PipelineTensors& rank : ranks) {
      if (rank.owned.count(tensor.name) == 0) continue;
      ++owners;
      EXPECT_EQ(rank.used.count(tensor.name), 1u) << tensor.name;
    }
    EXPECT_EQ(owners, 1) << tensor.name;
  }
  for (const PipelineTensors& rank : ranks) {
    EXPECT_EQ(rank.shared, ranks[0].shared);
  }
}

TEST(StageParametersTest, TwoStagesShareOnlyTheEmbeddingForMtp) {
  ModelParameters params(*PresetConfig("glm5.2-tiny"));
  const std::vector<StageSlice> plan = Plan(params.config(), "Etttttt|ttmL", 2);
  const PipelineTensors first = PipelineTensorsOf(params, plan, 0);
  const PipelineTensors last = PipelineTensorsOf(params, plan, 1);
  // The MTP layer embeds the shifted tokens on the last stage.
  EXPECT_EQ(first.shared,
            std::vector<std::string>{"model.embed_tokens.weight"});
  EXPECT_EQ(first.owned.count("model.embed_tokens.weight"), 1u);
  EXPECT_EQ(last.used.count("model.embed_tokens.weight"), 1u);
  EXPECT_EQ(last.owned.count("model.embed_tokens.weight"), 0u);
  for (const NamedTensor& tensor : params.Named()) {
    const std::string& name = tensor.name;
    const bool early_layer = StartsWith(name, "model.layers.") &&
                             !StartsWith(name, "model.layers.6.") &&
                             !StartsWith(name, "model.layers.7.") &&
                             !StartsWith(name, "model.layers.8.");
    if (name == "model.embed_tokens.weight") continue;
    EXPECT_EQ(first.used.count(name), early_layer ? 1u : 0u) << name;
    EXPECT_EQ(last.used.count(name), early_layer ? 0u : 1u) << name;
  }
  ExpectPartition(params, plan, 2);
}

TEST(StageParametersTest, VirtualStagesGiveARankEachOfItsChunksLayers) {
  ModelParameters params(*PresetConfig("glm5.2-tiny"));
  const std::vector<StageSlice> plan =
      Plan(params.config(), "Et|t|tttt|ttmL", 2);
  const PipelineTensors rank1 = PipelineTensorsOf(params, plan, 1);
  // Rank 1 holds stage 1 (layer 2) and stage 3 (layers 7-8, head, MTP).
  for (const char* prefix :
       {"model.layers.1.", "model.layers.6.", "model.layers.7.",
        "model.layers.8.", "model.norm.", "lm_head."}) {
    bool found = false;
    for (const std::string& name : rank1.used) {
      found = found || StartsWith(name, prefix);
    }
    EXPECT_TRUE(found) << prefix;
  }
  for (const std::string& name : rank1.used) {
    EXPECT_FALSE(StartsWith(name, "model.layers.0.") ||
                 StartsWith(name, "model.layers.2."))
        << name;
  }
  ExpectPartition(params, plan, 2);
}

TEST(StageParametersTest, ThreeRanksAgreeOnSharedTensors) {
  ModelConfig config = *PresetConfig("glm5-tiny");
  config.tie_word_embeddings = true;
  ModelParameters params(config);
  const std::vector<StageSlice> plan = Plan(config, "Ettt|ttt|ttmL", 3);
  const PipelineTensors middle = PipelineTensorsOf(params, plan, 1);
  // The tied head reads the embedding on the last stage; the middle rank
  // reads neither copy but still takes part in the sum.
  EXPECT_EQ(middle.shared,
            std::vector<std::string>{"model.embed_tokens.weight"});
  EXPECT_EQ(middle.used.count("model.embed_tokens.weight"), 0u);
  ExpectPartition(params, plan, 3);
}

}  // namespace
}  // namespace glm
