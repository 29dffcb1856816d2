// Peak memory of the busiest rank of each pipeline rank, by term: its state
// (planner/rank_state.h), the activations of the micro batches its
// schedule keeps in flight with the transient of the pass at the peak
// (planner/pipeline_memory.h), or, after the micro batches, the gradient
// exchange's buffers (planner/gradient_exchange.h) with what activations
// stay alive then; the CUDA kernels' scratch, the device runtime and the
// allocator's slack.
#ifndef GLM_PLANNER_RANK_MEMORY_H_
#define GLM_PLANNER_RANK_MEMORY_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/activation_memory.h"
#include "planner/hardware.h"
#include "planner/pipeline_memory.h"
#include "planner/plan_job.h"
#include "planner/rank_state.h"
#include "planner/split.h"

namespace glm {

struct RankMemory {
  int pp_rank = 0;
  StateBytes state;
  SchedulePeak schedule;
  int64_t exchange = 0;  // gradient exchange buffers
  int64_t retained = 0;  // activations alive during the exchange
  // The CUDA backend's grow-only scratch buffers, held at the largest any of
  // the rank's stages asks (StageActivationBytes::scratch).
  int64_t scratch = 0;
  int64_t runtime = 0;
  int64_t slack = 0;
  // One micro batch of the rank's first stage, for explanations.
  StageActivationBytes first_stage;

  int64_t Activations() const {
    return std::max(schedule.Total(), exchange + retained);
  }
  int64_t Peak() const {
    return state.Total() + Activations() + scratch + runtime + slack;
  }
};

absl::StatusOr<RankMemory> PipelineRankMemory(const PlanJob& job,
                                              const SplitPlan& plan,
                                              const DeviceSpec& device,
                                              int pp_rank);

// Every pp rank's, in pp-rank order.
absl::StatusOr<std::vector<RankMemory>> SplitMemory(const PlanJob& job,
                                                    const SplitPlan& plan,
                                                    const DeviceSpec& device);

}  // namespace glm

#endif  // GLM_PLANNER_RANK_MEMORY_H_
