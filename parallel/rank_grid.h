// Megatron's rank grid: each global rank's coordinate in every parallel group.
//
// Dense layers: world = TP * CP * DP * PP, ranks ordered tp-cp-dp-pp (tp
// fastest, pp slowest). Expert layers fold the same ranks into world = ETP * EP
// * EDP * PP, ordered etp-ep-edp-pp, so the pp coordinate agrees between the
// two grids. Together this is Megatron's order tp-cp-ep-dp-pp with EP = 1 in
// the dense decomposition.
#ifndef GLM_PARALLEL_RANK_GRID_H_
#define GLM_PARALLEL_RANK_GRID_H_

#include <vector>

#include "absl/status/statusor.h"

namespace glm {

struct GridSpec {
  int world = 1, tp = 1, pp = 1, cp = 1, ep = 1, etp = 1;
  int num_experts = 0;  // 0 = not checked
};

struct RankCoordinates {
  int rank, tp, cp, ep, dp, pp, etp, edp;
};

struct RankGrid {
  int dp, edp;  // derived data-parallel and expert-data-parallel sizes
  std::vector<RankCoordinates> ranks;
};

// Bound on world that keeps a mistyped size from exhausting memory.
inline constexpr int kMaxWorld = 1 << 20;

// InvalidArgument naming the violated constraint: sizes >= 1, world <=
// kMaxWorld, world divisible by tp*cp*pp and by etp*ep*pp, num_experts
// divisible by ep.
absl::StatusOr<RankGrid> BuildRankGrid(const GridSpec& spec);

}  // namespace glm

#endif  // GLM_PARALLEL_RANK_GRID_H_
