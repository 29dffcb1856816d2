#include "parallel/layout_planner.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/layout_parser.h"

namespace glm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

LayoutRequest Sizes(int layers, int mtp, int pp, int vpp,
                    IndexSharing sharing) {
  LayoutRequest request;
  request.num_layers = layers;
  request.mtp_layers = mtp;
  request.pp = pp;
  request.vpp = vpp;
  request.sharing = sharing;
  return request;
}

// The layout `request` gets from the planner, checked by the validator.
std::vector<StageSlice> PlannedSlices(const LayoutRequest& request) {
  absl::StatusOr<std::string> layout = PlanLayout(request);
  EXPECT_TRUE(layout.ok()) << layout.status();
  LayoutRequest check = request;
  check.layout = layout.value_or("");
  absl::StatusOr<std::vector<StageSlice>> slices = PlanStages(check);
  EXPECT_TRUE(slices.ok()) << check.layout << ": " << slices.status();
  return slices.value_or(std::vector<StageSlice>{});
}

// The smallest bottleneck over every layout the validator accepts, by
// enumeration: every non-decreasing choice of decoder layers before each stage
// and every stage for the MTP layers.
double BruteForceLargestStageCost(const LayoutRequest& request) {
  const int stages = request.pp * std::max(request.vpp, 1);
  double best = 1e18;
  std::vector<int> before(stages + 1, 0);
  before[stages] = request.num_layers;
  std::function<void(int)> choose = [&](int stage) {
    if (stage == stages) {
      for (int mtp_stage = 0; mtp_stage < stages; ++mtp_stage) {
        std::vector<std::string> symbols;
        for (int s = 0; s < stages; ++s) {
          std::string stage_symbols = s == 0 ? "E" : "";
          stage_symbols += std::string(before[s + 1] - before[s], 't');
          if (s == mtp_stage)
            stage_symbols += std::string(request.mtp_layers, 'm');
          if (s == stages - 1) stage_symbols += "L";
          symbols.push_back(stage_symbols);
        }
        LayoutRequest candidate = request;
        candidate.layout = FormatLayout(symbols);
        absl::StatusOr<std::vector<StageSlice>> slices = PlanStages(candidate);
        if (slices.ok()) best = std::min(best, LargestStageCost(*slices));
        if (request.mtp_layers == 0) break;
      }
      return;
    }
    for (int p = before[stage - 1]; p <= request.num_layers; ++p) {
      // A non-empty stage must start on a computing layer; skip hopeless
      // prefixes.
      if (p < request.num_layers && p > before[stage - 1] &&
          !request.sharing.IsComputingLayer(p + 1)) {
        continue;
      }
      before[stage] = p;
      choose(stage + 1);
    }
  };
  choose(1);
  return best;
}

TEST(LayoutPlannerTest, MatchesExhaustiveSearchOnSmallModels) {
  const LayoutRequest cases[] = {
      Sizes(10, 1, 3, 1, IndexSharing{4, 3}),
      Sizes(12, 0, 2, 2, IndexSharing{2, 1}),
      Sizes(9, 2, 2, 2, IndexSharing{3, 2}),
      Sizes(7, 1, 4, 1, IndexSharing{1, 2}),
      Sizes(16, 1, 4, 1, IndexSharing{4, 3}),
      Sizes(3, 1, 3, 2, IndexSharing{4, 3}),
  };
  for (const LayoutRequest& request : cases) {
    SCOPED_TRACE(::testing::Message() << request.num_layers << " layers, pp "
                                      << request.pp << " vpp " << request.vpp);
    EXPECT_DOUBLE_EQ(LargestStageCost(PlannedSlices(request)),
                     BruteForceLargestStageCost(request));
  }
}

TEST(LayoutPlannerTest, Glm52Pp4IsOptimal) {
  LayoutRequest request = Sizes(78, 1, 4, 1, IndexSharing{4, 3});
  std::vector<StageSlice> slices = PlannedSlices(request);
  ASSERT_EQ(slices.size(), 4u);
  // 84 units over 4 stages is 21 each; boundaries land every 4 layers.
  EXPECT_DOUBLE_EQ(LargestStageCost(slices),
                   BruteForceLargestStageCost(request));
  EXPECT_LE(LargestStageCost(slices), 23);
}

TEST(LayoutPlannerTest, Glm52Pp8AndVirtualStagesAreBalanced) {
  struct Case {
    int pp, vpp;
  };
  for (Case c :
       {Case{8, 1}, Case{11, 1}, Case{13, 1}, Case{4, 2}, Case{6, 2}}) {
    SCOPED_TRACE(::testing::Message() << "pp " << c.pp << " vpp " << c.vpp);
    LayoutRequest request = Sizes(78, 1, c.pp, c.vpp, IndexSharing{4, 3});
    std::vector<StageSlice> slices = PlannedSlices(request);
    ASSERT_EQ(slices.size(), static_cast<size_t>(c.pp * c.vpp));
    // No stage exceeds the mean by more than one sharing group (4 layers): a
    // boundary can only move in steps of 4.
    const double total = 78 + kEmbeddingCost + kLossCost + kMtpLayerCost;
    EXPECT_LE(LargestStageCost(slices), total / slices.size() + 4)
        << slices.size();
  }
}

TEST(LayoutPlannerTest, BeatsTheVerificationCardLayoutAtPp11) {
  LayoutRequest request = Sizes(78, 1, 11, 1, IndexSharing{4, 3});
  // The card's layout ends with ttttmL (cost 9); the plan moves MTP and loss to
  // their own stage to reach the 8 of a full middle stage.
  EXPECT_DOUBLE_EQ(LargestStageCost(PlannedSlices(request)), 8);
}

TEST(LayoutPlannerTest, MoreStagesThanComputingLayersLeavesStagesEmpty) {
  LayoutRequest request = Sizes(4, 1, 4, 1, IndexSharing{4, 1});
  // Only layer 1 computes, so one stage holds every decoder layer.
  std::vector<StageSlice> slices = PlannedSlices(request);
  ASSERT_EQ(slices.size(), 4u);
  int holding = 0;
  for (const StageSlice& slice : slices) {
    if (slice.num_layers() == 0) continue;
    ++holding;
    EXPECT_EQ(slice.first_layer, 1);
    EXPECT_EQ(slice.last_layer, 4);
  }
  EXPECT_EQ(holding, 1);
}

TEST(LayoutPlannerTest, ExplainsImpossibleRequests) {
  LayoutRequest request = Sizes(78, 1, 4, 1, IndexSharing{4, 0});
  EXPECT_THAT(PlanLayout(request).status().message(),
              HasSubstr("layer 1 is a skip layer"));
  request = Sizes(60000, 0, 1000, 1, IndexSharing{4, 3});
  EXPECT_THAT(PlanLayout(request).status().message(),
              HasSubstr("search steps"));
  request = Sizes(78, 1, 4, 1, IndexSharing{4, 3});
  request.layout = "Et*78mL";
  EXPECT_THAT(PlanLayout(request).status().message(),
              HasSubstr("chooses the split itself"));
}

TEST(LayoutPlannerTest, SuggestionMovesBadBoundariesToNearestComputingLayer) {
  LayoutRequest request = Sizes(78, 1, 4, 1, IndexSharing{4, 3});
  request.num_layers_in_last_stage = 18;  // [20, 20, 20, 18]
  ASSERT_FALSE(PlanStages(request).ok());
  absl::StatusOr<LayoutSuggestion> suggestion = SuggestLayout(request);
  ASSERT_TRUE(suggestion.ok()) << suggestion.status();
  EXPECT_THAT(suggestion->method, HasSubstr("nearest computing layer"));
  LayoutRequest fixed = request;
  fixed.layout = suggestion->layout;
  fixed.num_layers_in_last_stage = 0;
  absl::StatusOr<std::vector<StageSlice>> slices = PlanStages(fixed);
  ASSERT_TRUE(slices.ok()) << slices.status();
  // 21, 41, 61 are two layers from both 19/23, 39/43, 59/63: ties go down.
  std::vector<int> starts;
  for (const StageSlice& slice : *slices) starts.push_back(slice.first_layer);
  EXPECT_THAT(starts, ElementsAre(1, 19, 39, 59));
}

TEST(LayoutPlannerTest, SuggestionForBrokenStructureIsThePlan) {
  LayoutRequest request = Sizes(78, 1, 4, 1, IndexSharing{4, 3});
  request.layout = "Et*70|t*8mL";  // 2 stages at pp 4
  absl::StatusOr<LayoutSuggestion> suggestion = SuggestLayout(request);
  ASSERT_TRUE(suggestion.ok()) << suggestion.status();
  request.layout.clear();
  EXPECT_EQ(suggestion->layout, PlanLayout(request).value());
}

TEST(LayoutPlannerTest, CostModelIsStated) {
  const std::string text = CostModelDescription();
  EXPECT_THAT(text, HasSubstr("decoder layer t = 1"));
  EXPECT_THAT(text, HasSubstr("loss L = 2"));
  EXPECT_THAT(text, HasSubstr("MTP layer m = 3"));
}

}  // namespace
}  // namespace glm
