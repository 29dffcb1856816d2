// How a job is split over its ranks, checked against the job and the world
// size with the same rules the coordinator and trainer apply (rank grid,
// pipeline layout with the index-sharing rule, tensor-parallel sizes), plus
// what Megatron's schedules need of the batch.
#ifndef GLM_PLANNER_SPLIT_H_
#define GLM_PLANNER_SPLIT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/pipeline_layout.h"
#include "parallel/rank_grid.h"
#include "planner/plan_job.h"

namespace glm {

class RankTensorsCache;

struct Split {
  int tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, etp = 1;
  // Megatron layout string; empty: the balanced one the layout planner
  // chooses (parallel/layout_planner.h).
  std::string layout;
};

// A valid split and what follows from it.
struct SplitPlan {
  Split split;
  int world = 0;
  RankGrid grid;       // dp and edp, and every rank's coordinates
  std::string layout;  // the layout used (given or planned; empty: pp 1)
  std::vector<StageSlice> stages;  // every stage, virtual ones included
  // Shared by the plans of one job's search (planner/rank_tensor_list.h);
  // null: lists are made afresh.
  std::shared_ptr<RankTensorsCache> tensors_cache;

  int dp() const { return grid.dp; }
  int edp() const { return grid.edp; }
  // Micro batches each pipeline runs per step.
  int64_t micro_batches_per_rank(const PlanJob& job) const {
    return job.micro_batches() / grid.dp;
  }
  // The stages pp rank `pp_rank` runs, in virtual-chunk order.
  std::vector<StageSlice> StagesOf(int pp_rank) const;
};

// "TP1 PP11 VPP1 CP1 EP32 ETP1 DP32", as tables name splits.
std::string SplitName(const SplitPlan& plan);

// The plan of `split` over `world` ranks, or InvalidArgument naming the
// flag and the rule it breaks.
absl::StatusOr<SplitPlan> PlanSplit(const PlanJob& job, int world,
                                    const Split& split);

}  // namespace glm

#endif  // GLM_PLANNER_SPLIT_H_
