#include "planner/split.h"

#include <string>

#include "gtest/gtest.h"

namespace glm {
namespace {

PlanJob Glm52(int64_t global_batch = 1024, int64_t seq = 2048) {
  PlanJob job;
  job.model = *PresetConfig("glm5.2");
  job.global_batch_size = global_batch;
  job.seq_length = seq;
  return job;
}

Split Of(int tp, int pp, int cp, int ep, std::string layout = "") {
  Split split;
  split.tp = tp;
  split.pp = pp;
  split.cp = cp;
  split.ep = ep;
  split.layout = std::move(layout);
  return split;
}

std::string ErrorOf(const PlanJob& job, int world, const Split& split) {
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, world, split);
  EXPECT_FALSE(plan.ok());
  return plan.ok() ? "" : std::string(plan.status().message());
}

TEST(SplitTest, TheSeedPretrainSplit) {
  absl::StatusOr<SplitPlan> plan = PlanSplit(
      Glm52(), 352,
      Of(1, 11, 1, 32,
         "Etttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|"
         "tttttttt|tttttttt|tttt|ttttmL"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->dp(), 32);
  EXPECT_EQ(plan->edp(), 1);
  EXPECT_EQ(plan->stages.size(), 11u);
  EXPECT_EQ(plan->micro_batches_per_rank(Glm52()), 32);
  EXPECT_EQ(SplitName(*plan), "TP1 PP11 VPP1 CP1 EP32 ETP1 DP32");
  const std::vector<StageSlice> last = plan->StagesOf(10);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].first_layer, 75);
  EXPECT_TRUE(last[0].has_loss);
}

TEST(SplitTest, PlannedLayoutsKeepTheMtpLayerWithTheLastLayer) {
  for (int pp : {2, 4, 6, 8, 13, 19}) {
    absl::StatusOr<SplitPlan> plan =
        PlanSplit(Glm52(1024), pp * 32, Of(1, pp, 1, 32));
    ASSERT_TRUE(plan.ok()) << pp << ": " << plan.status();
    for (const StageSlice& stage : plan->stages) {
      if (stage.mtp_layers > 0) {
        EXPECT_EQ(stage.last_layer, 78) << plan->layout;
        EXPECT_TRUE(stage.has_loss) << plan->layout;
      }
    }
  }
}

TEST(SplitTest, VirtualStagesAndContextChunks) {
  Split split = Of(1, 4, 2, 8);
  split.vpp = 2;
  absl::StatusOr<SplitPlan> plan = PlanSplit(Glm52(256), 64, split);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->stages.size(), 8u);
  EXPECT_EQ(plan->StagesOf(1).size(), 2u);
  EXPECT_EQ(plan->dp(), 8);
}

TEST(SplitTest, ErrorsNameTheFlagAndRule) {
  EXPECT_NE(ErrorOf(Glm52(), 100, Of(1, 11, 1, 1)).find("--world"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Glm52(), 48, Of(3, 1, 1, 1)).find("--tp: 3 does not"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Glm52(10), 16, Of(1, 1, 1, 1)).find("--global-batch"),
            std::string::npos);
  Split interleaved = Of(1, 4, 1, 1);
  interleaved.vpp = 2;
  EXPECT_NE(ErrorOf(Glm52(20), 8, interleaved).find("--vpp"),
            std::string::npos);
  Split one_stage = Of(1, 1, 1, 1);
  one_stage.vpp = 2;
  EXPECT_NE(ErrorOf(Glm52(), 8, one_stage).find("--vpp"), std::string::npos);
  EXPECT_NE(ErrorOf(Glm52(1024, 2050), 8, Of(1, 1, 4, 1)).find("--cp"),
            std::string::npos);
  Split experts = Of(1, 1, 1, 1);
  experts.etp = 3;
  EXPECT_NE(ErrorOf(Glm52(), 3, experts).find("--etp"), std::string::npos);
  // Stages 2-4 start on skip layers 21, 41, 61 (the slime review's example).
  EXPECT_NE(
      ErrorOf(Glm52(), 4,
              Of(1, 4, 1, 1,
                 "E" + std::string(20, 't') + "|" + std::string(20, 't') + "|" +
                     std::string(20, 't') + "|" + std::string(18, 't') + "mL"))
          .find("--layout"),
      std::string::npos);
  // The MTP layer on a stage without layer 78.
  EXPECT_NE(
      ErrorOf(Glm52(), 2, Of(1, 2, 1, 1, "E" + std::string(78, 't') + "|mL"))
          .find("MTP layer"),
      std::string::npos);
}

}  // namespace
}  // namespace glm
