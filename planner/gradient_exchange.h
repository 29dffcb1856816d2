// The largest buffer a rank's gradient and weight exchanges allocate after a
// step's micro batches. This trainer (--precision=fp32) copies the
// gradients each all-reduce sums into one flat buffer (training/
// gradient_sync.cc): over the context group (every token-parallel partial
// gradient), the tensor group (the unsplit ones), the pipeline group (the
// tensors several pp ranks read), the data-parallel group (dense tensors
// and routed experts apart under expert parallelism); under ZeRO-1 it packs
// padded blocks, block x ranks, which Gloo's reduce-scatter copies once
// more (parallel/gloo_collectives.cc), plus the rank's own block
// (training/distributed_optimizer.cc). Megatron (--precision=bf16) reduces
// its contiguous gradient buffer in place and gathers weights in place: 0.
// A model's gradients now lie in one host arena and are reduced there
// without the flat copy, ZeRO-1's too (only LoRA adapters' are packed), so
// for whole-model training this is an upper bound.
#ifndef GLM_PLANNER_GRADIENT_EXCHANGE_H_
#define GLM_PLANNER_GRADIENT_EXCHANGE_H_

#include <cstdint>

#include "parallel/rank_grid.h"
#include "planner/plan_job.h"
#include "planner/split.h"

namespace glm {

int64_t GradientExchangeBytes(const PlanJob& job, const SplitPlan& plan,
                              const RankCoordinates& rank);

}  // namespace glm

#endif  // GLM_PLANNER_GRADIENT_EXCHANGE_H_
