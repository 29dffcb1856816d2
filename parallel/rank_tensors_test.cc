#include "parallel/rank_tensors.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "parallel/expert_parallel_dispatch.h"
#include "parallel/pipeline_test_util.h"
#include "parallel/stage_parameters.h"
#include "parallel/tensor_parallel_shard.h"

namespace glm {
namespace {

constexpr uint64_t kSeed = 11;

ModelConfig Tiny() { return *PresetConfig("glm5.2-tiny"); }

// Two pp ranks; `layout` may give a rank more than one virtual chunk.
std::vector<StageSlice> Plan(const std::string& layout) {
  absl::StatusOr<std::vector<StageSlice>> plan =
      PlanForModel(Tiny(), layout, 2);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : std::vector<StageSlice>();
}

bool IsRoutedExperts(const std::string& name) {
  return absl::StrContains(name, "mlp.experts.");
}

// What the rank held before: the whole model initialized, then cut as the
// trainer used to (TensorParallelPart, the rank's expert slabs, the other
// stages' tensors dropped): `rank`'s tensors must equal that, element for
// element, and hold nothing else.
void ExpectRankHoldsItsShareOfTheWholeModel(const RankShare& share) {
  const ModelConfig config = Tiny();
  ModelParameters whole(config);
  whole.InitRandom(kSeed);
  ModelParameters rank(config, HeldTensorsOf(config, share));
  rank.InitRandom(kSeed);
  std::set<std::string> used;
  if (share.plan) {
    used = PipelineTensorsOf(whole, *share.plan, share.pp_rank).used;
  }
  const ExpertRange experts =
      ExpertsOfRank(config.n_routed_experts, share.ep, share.ep_rank);
  std::vector<NamedTensor> whole_tensors = whole.Named();
  std::vector<NamedTensor> rank_tensors = rank.Named();
  ASSERT_EQ(whole_tensors.size(), rank_tensors.size());
  int64_t held = 0;
  for (size_t i = 0; i < whole_tensors.size(); ++i) {
    const std::string& name = whole_tensors[i].name;
    const Tensor& mine = *rank_tensors[i].value;
    const Tensor& all = *whole_tensors[i].value;
    held += mine.numel();
    if (share.plan && used.count(name) == 0) {
      EXPECT_TRUE(mine.empty()) << name;
      continue;
    }
    if (rank_tensors[i].grad != nullptr) {
      EXPECT_EQ(rank_tensors[i].grad->shape(), mine.shape()) << name;
    }
    const int dim = TensorParallelDim(name);
    if (share.tp > 1 && dim >= 0) {
      EXPECT_EQ(
          mine.HostValues(),
          TensorParallelPart(all, dim, share.tp, share.tp_rank).HostValues())
          << name;
    } else if (share.ep > 1 && IsRoutedExperts(name)) {
      ASSERT_EQ(mine.dim(0), experts.count) << name;
      const int64_t slab = all.numel() / all.dim(0);
      EXPECT_TRUE(std::equal(mine.data(), mine.data() + mine.numel(),
                             all.data() + experts.first * slab))
          << name;
    } else {
      EXPECT_EQ(mine.HostValues(), all.HostValues()) << name;
    }
  }
  // Each rank holds less than the whole model.
  int64_t total = 0;
  for (const NamedTensor& named : whole_tensors) total += named.value->numel();
  EXPECT_LT(held, total);
}

TEST(RankTensorsTest, PipelineRanksHoldTheirStagesTensors) {
  for (const char* layout : {"Etttttt|ttmL", "Et|t|tttt|ttmL"}) {
    for (int pp_rank : {0, 1}) {
      RankShare share;
      share.plan = Plan(layout);
      share.pp_rank = pp_rank;
      ExpectRankHoldsItsShareOfTheWholeModel(share);
    }
  }
}

TEST(RankTensorsTest, ExpertRanksHoldTheirExperts) {
  for (int ep_rank : {0, 1, 3}) {
    RankShare share;
    share.ep = 4;
    share.ep_rank = ep_rank;
    ExpectRankHoldsItsShareOfTheWholeModel(share);
  }
}

TEST(RankTensorsTest, TensorRanksHoldTheirRowsAndColumns) {
  for (int tp_rank : {0, 1}) {
    RankShare share;
    share.tp = 2;
    share.tp_rank = tp_rank;
    ExpectRankHoldsItsShareOfTheWholeModel(share);
  }
}

TEST(RankTensorsTest, SplitsCombine) {
  RankShare share;
  share.plan = Plan("Etttttt|ttmL");
  share.pp_rank = 1;
  share.tp = 2;
  share.tp_rank = 1;
  ExpectRankHoldsItsShareOfTheWholeModel(share);
  share.tp = 1;
  share.tp_rank = 0;
  share.ep = 2;
  share.ep_rank = 1;
  ExpectRankHoldsItsShareOfTheWholeModel(share);
}

TEST(RankTensorsTest, OneRankHoldsEverything) {
  const HeldTensors held = HeldTensorsOf(Tiny(), RankShare());
  EXPECT_FALSE(held.names.has_value());
  EXPECT_TRUE(held.parts.empty());
}

}  // namespace
}  // namespace glm
