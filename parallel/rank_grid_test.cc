#include "parallel/rank_grid.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

using ::testing::HasSubstr;

// {rank, tp, cp, ep, dp, pp, etp, edp} rows. Specs are
// GridSpec{world, tp, pp, cp, ep, etp, num_experts}.
std::vector<std::vector<int>> Rows(const RankGrid& grid) {
  std::vector<std::vector<int>> rows;
  for (const RankCoordinates& c : grid.ranks) {
    rows.push_back({c.rank, c.tp, c.cp, c.ep, c.dp, c.pp, c.etp, c.edp});
  }
  return rows;
}

TEST(RankGridTest, EightRanksTp2Pp2Ep2) {
  absl::StatusOr<RankGrid> grid = BuildRankGrid(GridSpec{8, 2, 2, 1, 2, 1, 0});
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(grid->dp, 2);
  EXPECT_EQ(grid->edp, 2);
  const std::vector<std::vector<int>> expected = {
      // rank tp cp ep dp pp etp edp
      {0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 0, 1, 0, 0, 0, 0},
      {2, 0, 0, 0, 1, 0, 0, 1}, {3, 1, 0, 1, 1, 0, 0, 1},
      {4, 0, 0, 0, 0, 1, 0, 0}, {5, 1, 0, 1, 0, 1, 0, 0},
      {6, 0, 0, 0, 1, 1, 0, 1}, {7, 1, 0, 1, 1, 1, 0, 1},
  };
  EXPECT_EQ(Rows(*grid), expected);
}

TEST(RankGridTest, SixteenRanksWithContextAndWideExpertParallel) {
  absl::StatusOr<RankGrid> grid = BuildRankGrid(GridSpec{16, 2, 2, 2, 4, 1, 0});
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(grid->dp, 2);
  EXPECT_EQ(grid->edp, 2);
  const std::vector<std::vector<int>> rows = Rows(*grid);
  ASSERT_EQ(rows.size(), 16u);
  // rank tp cp ep dp pp etp edp
  EXPECT_EQ(rows[5], (std::vector<int>{5, 1, 0, 1, 1, 0, 0, 1}));
  EXPECT_EQ(rows[6], (std::vector<int>{6, 0, 1, 2, 1, 0, 0, 1}));
  EXPECT_EQ(rows[11], (std::vector<int>{11, 1, 1, 3, 0, 1, 0, 0}));
  EXPECT_EQ(rows[14], (std::vector<int>{14, 0, 1, 2, 1, 1, 0, 1}));
}

TEST(RankGridTest, ExpertTensorParallelIsFastestInExpertGrid) {
  absl::StatusOr<RankGrid> grid = BuildRankGrid(GridSpec{8, 2, 1, 1, 2, 2, 4});
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(grid->dp, 4);
  EXPECT_EQ(grid->edp, 2);
  const std::vector<std::vector<int>> rows = Rows(*grid);
  EXPECT_EQ(rows[3], (std::vector<int>{3, 1, 0, 1, 1, 0, 1, 0}));
  EXPECT_EQ(rows[7], (std::vector<int>{7, 1, 0, 1, 3, 0, 1, 1}));
}

TEST(RankGridTest, Glm52PretrainGrid) {
  // The verification card's 352 H100: TP1 PP11 CP1 EP32 ETP1, 256 experts.
  absl::StatusOr<RankGrid> grid =
      BuildRankGrid(GridSpec{352, 1, 11, 1, 32, 1, 256});
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(grid->dp, 32);
  EXPECT_EQ(grid->edp, 1);
  EXPECT_EQ(grid->ranks.back().pp, 10);
  EXPECT_EQ(grid->ranks.back().ep, 31);
}

std::string GridError(const GridSpec& spec) {
  absl::StatusOr<RankGrid> grid = BuildRankGrid(spec);
  EXPECT_FALSE(grid.ok());
  EXPECT_EQ(grid.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(grid.status().message());
}

TEST(RankGridTest, EachConstraintIsNamed) {
  EXPECT_THAT(GridError(GridSpec{12, 2, 4, 1, 1, 1, 0}),
              HasSubstr("world % (tp*cp*pp) == 0 violated: world 12 is not "
                        "divisible by tp*cp*pp = 2*1*4 = 8"));
  EXPECT_THAT(GridError(GridSpec{12, 2, 2, 1, 4, 1, 0}),
              HasSubstr("world % (etp*ep*pp) == 0 violated"));
  EXPECT_THAT(GridError(GridSpec{8, 1, 1, 1, 4, 1, 6}),
              HasSubstr("num_experts % ep == 0 violated: 6 experts do not "
                        "divide over ep 4"));
  EXPECT_THAT(GridError(GridSpec{8, 1, 1, 0, 1, 1, 0}),
              HasSubstr("cp >= 1 violated"));
  EXPECT_THAT(GridError(GridSpec{1 << 30, 1, 1, 1, 1, 1, 0}),
              HasSubstr("world <= 1048576 violated"));
  EXPECT_THAT(GridError(GridSpec{0, 1, 1, 1, 1, 1, 0}),
              HasSubstr("world >= 1 violated"));
}

}  // namespace
}  // namespace glm
