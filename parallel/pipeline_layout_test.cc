#include "parallel/pipeline_layout.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

LayoutRequest Request(const std::string& layout, int layers, int mtp, int pp,
                      IndexSharing sharing = IndexSharing{}) {
  LayoutRequest request;
  request.layout = layout;
  request.num_layers = layers;
  request.mtp_layers = mtp;
  request.pp = pp;
  request.sharing = sharing;
  return request;
}

// GLM-5.2: 78 decoder layers, one MTP layer, top-k shared by 4 layers after
// layer 3.
LayoutRequest Glm52(const std::string& layout, int pp) {
  return Request(layout, 78, 1, pp, IndexSharing{4, 3});
}

std::vector<int> FirstLayers(const std::vector<StageSlice>& slices) {
  std::vector<int> first;
  for (const StageSlice& slice : slices) first.push_back(slice.first_layer);
  return first;
}

std::string PlanError(const LayoutRequest& request) {
  absl::StatusOr<std::vector<StageSlice>> slices = PlanStages(request);
  EXPECT_FALSE(slices.ok());
  EXPECT_EQ(slices.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(slices.status().message());
}

// The pretraining layout of the GLM-5.2 verification card (352 H100, PP11).
constexpr char kPretrainPp11[] =
    "Etttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|"
    "tttttttt|tttt|ttttmL";
// The SFT layout of the verification card (416 H100, PP13).
constexpr char kSftPp13[] =
    "Etttttt|tttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttt|"
    "tttt|tttt|tttt|ttttmL";

TEST(PipelineLayoutTest, VerificationCardPretrainLayoutIsValid) {
  absl::StatusOr<std::vector<StageSlice>> slices =
      PlanStages(Glm52(kPretrainPp11, 11));
  ASSERT_TRUE(slices.ok()) << slices.status();
  EXPECT_THAT(FirstLayers(*slices),
              ElementsAre(1, 7, 15, 23, 31, 39, 47, 55, 63, 71, 75));
  const StageSlice& last = slices->back();
  EXPECT_EQ(last.last_layer, 78);
  EXPECT_EQ(last.mtp_layers, 1);
  EXPECT_TRUE(last.has_loss);
  EXPECT_THAT(last.computing_layers, ElementsAre(75));
  EXPECT_TRUE(slices->front().has_embedding);
  EXPECT_THAT(slices->front().computing_layers, ElementsAre(1, 2, 3));
}

TEST(PipelineLayoutTest, VerificationCardSftLayoutIsValid) {
  absl::StatusOr<std::vector<StageSlice>> slices =
      PlanStages(Glm52(kSftPp13, 13));
  ASSERT_TRUE(slices.ok()) << slices.status();
  EXPECT_THAT(FirstLayers(*slices),
              ElementsAre(1, 7, 11, 19, 27, 35, 43, 51, 59, 63, 67, 71, 75));
}

TEST(PipelineLayoutTest, SlimeConversionSplitFailsOnSkipLayers) {
  // --decoder-last-pipeline-num-layers 18 at PP4: [20, 20, 20, 18].
  LayoutRequest request = Glm52("", 4);
  request.num_layers_in_last_stage = 18;
  std::string error = PlanError(request);
  EXPECT_THAT(error,
              AllOf(HasSubstr("stages start on computing layers"),
                    HasSubstr("stage 1 (pp rank 1, virtual chunk 0) starts at "
                              "layer 21, a skip layer whose source computing "
                              "layer 19"),
                    HasSubstr("stage 2 (pp rank 2, virtual chunk 0) starts at "
                              "layer 41, a skip layer whose source computing "
                              "layer 39"),
                    HasSubstr("stage 3 (pp rank 3, virtual chunk 0) starts at "
                              "layer 61, a skip layer whose source computing "
                              "layer 59"),
                    HasSubstr("index_topk_freq=4, index_skip_topk_offset=3")));
}

TEST(PipelineLayoutTest, SlimeFixedSplitPasses) {
  LayoutRequest request = Glm52("", 4);
  request.num_layers_in_first_stage = 14;
  request.num_layers_in_last_stage = 24;
  absl::StatusOr<std::vector<StageSlice>> slices = PlanStages(request);
  ASSERT_TRUE(slices.ok()) << slices.status();
  EXPECT_THAT(FirstLayers(*slices), ElementsAre(1, 15, 35, 55));
  EXPECT_EQ(slices->back().last_layer, 78);
  EXPECT_EQ(slices->back().mtp_layers, 1);
}

TEST(PipelineLayoutTest, SameRuleAppliesToLayoutStrings) {
  std::string error = PlanError(Glm52("Et*20|t*20|t*20|t*18,mL", 4));
  EXPECT_THAT(error, HasSubstr("starts at layer 21"));
  EXPECT_THAT(error, HasSubstr("starts at layer 61"));
}

TEST(PipelineLayoutTest, EvenSplit) {
  LayoutRequest request = Request("", 8, 0, 4);
  absl::StatusOr<std::vector<StageSlice>> slices = PlanStages(request);
  ASSERT_TRUE(slices.ok()) << slices.status();
  EXPECT_THAT(FirstLayers(*slices), ElementsAre(1, 3, 5, 7));
  EXPECT_TRUE((*slices)[0].has_embedding);
  EXPECT_TRUE((*slices)[3].has_loss);
}

TEST(PipelineLayoutTest, EvenSplitMustDivide) {
  LayoutRequest request = Request("", 78, 0, 4);
  EXPECT_THAT(PlanError(request),
              HasSubstr("num_layers 78 is not divisible by pp 4"));
  request.pp = 2;
  request.vpp = 2;
  EXPECT_THAT(PlanError(request),
              HasSubstr("holds 39 layers, not divisible by vpp 2"));
}

TEST(PipelineLayoutTest, EvenSplitWithVirtualStagesInterleaves) {
  LayoutRequest request = Request("", 8, 1, 2);
  request.vpp = 2;
  absl::StatusOr<std::vector<StageSlice>> slices = PlanStages(request);
  ASSERT_TRUE(slices.ok()) << slices.status();
  ASSERT_EQ(slices->size(), 4u);
  // Stage i is pp rank i % 2, chunk i / 2.
  EXPECT_EQ((*slices)[1].pp_rank, 1);
  EXPECT_EQ((*slices)[1].virtual_chunk, 0);
  EXPECT_EQ((*slices)[2].pp_rank, 0);
  EXPECT_EQ((*slices)[2].virtual_chunk, 1);
  EXPECT_THAT(FirstLayers(*slices), ElementsAre(1, 3, 5, 7));
  EXPECT_EQ((*slices)[3].mtp_layers, 1);
}

TEST(PipelineLayoutTest, UnevenSplitMustDivide) {
  LayoutRequest request = Glm52("", 4);
  request.num_layers_in_first_stage = 15;
  request.num_layers_in_last_stage = 24;
  EXPECT_THAT(
      PlanError(request),
      HasSubstr("39 layers left after first stage 15 and last stage 24"));
  request.pp = 1;
  EXPECT_THAT(PlanError(request), HasSubstr("need pp >= 2"));
}

TEST(PipelineLayoutTest, UnevenSplitDividesRanksOverVirtualChunks) {
  LayoutRequest request = Request("", 14, 0, 3);
  request.vpp = 2;
  request.num_layers_in_first_stage = 2;  // ranks hold 2, 6, 6
  absl::StatusOr<std::vector<StageSlice>> slices = PlanStages(request);
  ASSERT_TRUE(slices.ok()) << slices.status();
  // Chunk 0 of ranks 0, 1, 2, then chunk 1: 1, 3, 3, 1, 3, 3 layers.
  EXPECT_THAT(FirstLayers(*slices), ElementsAre(1, 2, 5, 8, 9, 12));
  request.num_layers_in_first_stage = 4;  // ranks hold 4, 5, 5
  EXPECT_THAT(PlanError(request),
              HasSubstr("pp rank 1 holds 5 layers, not divisible by vpp 2"));
}

TEST(PipelineLayoutTest, VirtualStagesDerivedFromLayout) {
  LayoutRequest request = Request("Et|t|t|tL", 4, 0, 2);
  absl::StatusOr<std::vector<StageSlice>> slices = PlanStages(request);
  ASSERT_TRUE(slices.ok()) << slices.status();
  EXPECT_EQ(slices->back().pp_rank, 1);
  EXPECT_EQ(slices->back().virtual_chunk, 1);
  request.vpp = 2;
  absl::StatusOr<std::vector<StageSlice>> given = PlanStages(request);
  ASSERT_TRUE(given.ok()) << given.status();
  ASSERT_EQ(given->size(), 4u);
  // Stages go round the pp ranks: chunk 0 on ranks 0, 1, then chunk 1.
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ((*given)[s].pp_rank, s % 2) << s;
    EXPECT_EQ((*given)[s].virtual_chunk, s / 2) << s;
  }
  request.vpp = 3;
  EXPECT_THAT(PlanError(request),
              AllOf(HasSubstr("vpp = stages / pp"), HasSubstr("vpp 3")));
}

TEST(PipelineLayoutTest, IndexSharingAppliesToVirtualStages) {
  // Virtual stages start at 1, 3, 6, 9; layers 1, 3, 5, 7, 9, 11 compute.
  LayoutRequest request =
      Request("Ett|ttt|ttt|tttL", 11, 0, 2, IndexSharing{2, 1});
  EXPECT_THAT(
      PlanError(request),
      AllOf(HasSubstr("stage 2 (pp rank 0, virtual chunk 1) starts at "
                      "layer 6"),
            HasSubstr("source computing layer 5"), Not(HasSubstr("layer 9,"))));
}

TEST(PipelineLayoutTest, EmptyStagesAreAllowedAndNotChecked) {
  // Layer 4 is a skip layer.
  LayoutRequest request = Request("Ettt||t|L", 4, 0, 4, IndexSharing{4, 3});
  EXPECT_THAT(PlanError(request), HasSubstr("stage 2 (pp rank 2, virtual "
                                            "chunk 0) starts at layer 4"));
  request.layout = "Etttt|||L";
  absl::StatusOr<std::vector<StageSlice>> slices = PlanStages(request);
  ASSERT_TRUE(slices.ok()) << slices.status();
  EXPECT_EQ((*slices)[1].first_layer, 0);
  EXPECT_EQ((*slices)[1].last_layer, 0);
  EXPECT_TRUE((*slices)[1].computing_layers.empty());
}

struct RuleCase {
  const char* layout;
  int pp;
  const char* rule;
};

class StageRuleTest : public ::testing::TestWithParam<RuleCase> {};

TEST_P(StageRuleTest, NamesTheRule) {
  LayoutRequest request = Request(GetParam().layout, 4, 1, GetParam().pp);
  EXPECT_THAT(PlanError(request),
              HasSubstr(absl::StrCat("layout rule '", GetParam().rule, "'")));
}

INSTANTIATE_TEST_SUITE_P(
    Rules, StageRuleTest,
    ::testing::Values(RuleCase{"Ett|tt|mL", 2, "stage count divisible by pp"},
                      RuleCase{"tt|ttmL", 2, "exactly one E"},
                      RuleCase{"EEtt|ttmL", 2, "exactly one E"},
                      RuleCase{"tEt|ttmL", 2, "E first"},
                      RuleCase{"Ett|ttm", 2, "exactly one L"},
                      RuleCase{"EttL|ttmL", 2, "exactly one L"},
                      RuleCase{"Ett|ttLm", 2, "L last"},
                      RuleCase{"Ett|tmL", 2, "decoder layer count"},
                      RuleCase{"Ett|ttmmL", 2, "MTP layer count"},
                      RuleCase{"Ett|tL", 2, "decoder layer count"},
                      RuleCase{"Ett|tmtL", 2, "no t after m"},
                      RuleCase{"Etttm|tL", 2, "no t after m"},
                      RuleCase{"Ettt|tm||L", 2, "MTP in last virtual chunk"}));

TEST(PipelineLayoutTest, MtpStandaloneStageIsAllowed) {
  // Megatron allows MTP on its own stage before the loss stage, in the last
  // chunk.
  LayoutRequest request = Request("Ett|tt|t|m|L", 5, 1, 5);
  EXPECT_TRUE(PlanStages(request).ok());
}

TEST(PipelineLayoutTest, MtpSplitOverStagesIsRejected) {
  LayoutRequest request = Request("Ettm|mL", 2, 2, 2);
  EXPECT_THAT(PlanError(request), HasSubstr("MTP in one stage"));
}

TEST(PipelineLayoutTest, RequestErrors) {
  LayoutRequest request = Glm52(kPretrainPp11, 11);
  request.num_layers_in_first_stage = 6;
  EXPECT_THAT(PlanError(request), HasSubstr("not both"));
  request = Glm52(kPretrainPp11, 0);
  EXPECT_THAT(PlanError(request), HasSubstr("pp must be at least 1"));
  request = Glm52(kPretrainPp11, 11);
  request.sharing = IndexSharing{4, 0};
  EXPECT_THAT(PlanError(request), HasSubstr("layer 1 is a skip layer"));
  request = Glm52(kPretrainPp11, 11);
  request.num_layers = 1 << 30;
  EXPECT_THAT(PlanError(request), HasSubstr("at most 65536"));
  request = Glm52("", 1 << 16);
  request.vpp = 2;
  EXPECT_THAT(PlanError(request), HasSubstr("pp * vpp must be at most"));
  request = Glm52("Et*78|(mL", 1);
  EXPECT_THAT(PlanError(request), HasSubstr("unclosed '(' at position 7"));
}

}  // namespace
}  // namespace glm
