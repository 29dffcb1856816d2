// What a rank keeps for the whole run: its weights, their gradients, the
// optimizer's master weights and AdamW moments of what it updates, and LoRA
// adapters. The tensors come from the code that decides what a rank
// allocates (parallel/rank_tensors.h); the tensors it updates from the
// trainer's rules (every trainable tensor it holds, or its ZeRO-1 shard:
// training/distributed_optimizer.h, routed experts apart under expert
// parallelism).
//
// In their dtypes (planner/plan_job.h):
// - kFp32, this trainer: values and gradients fp32 for every held parameter
//   (buffers: values only), moments fp32 of updated tensors in flat buffers
//   (each tensor's rounded up to 256 bytes), no master copy; ZeRO-1 over the
//   data-parallel group. LoRA keeps A, B and their gradients of every target
//   of the model on every rank, a frozen copy of each held target weight,
//   and moments of its held targets' adapters (a tensor each).
// - kFp32Bf16Copies, this trainer's CUDA bf16 mode: kFp32's, plus a bf16
//   copy of every held product weight (model/weight_copies.h) in one
//   allocation, each copy starting on 16 bytes (kernels/bf16_copy_layout.h,
//   as kernels/cuda/bf16_weight_copies.cc allocates them).
// - kBf16Mixed, Megatron-Core: bf16 values, fp32 gradients of trainable
//   tensors, fp32 master weights and moments of updated tensors; ZeRO-1
//   over data x context parallel ranks for dense tensors, over the expert-
//   data-parallel ranks for routed experts. LoRA trains bf16 adapters of the
//   held targets; frozen weights have no gradients.
// Routed experts split further over etp ranks (Megatron's expert tensor
// parallelism) along their intermediate dimension.
#ifndef GLM_PLANNER_RANK_STATE_H_
#define GLM_PLANNER_RANK_STATE_H_

#include <cstdint>

#include "parallel/rank_grid.h"
#include "planner/plan_job.h"
#include "planner/split.h"

namespace glm {

struct StateBytes {
  int64_t weights = 0;  // values the model computes with, and buffers
  int64_t gradients = 0;
  int64_t master = 0;    // fp32 copies of the bf16 weights it updates
  int64_t moments = 0;   // AdamW exp_avg and exp_avg_sq
  int64_t adapters = 0;  // LoRA: adapters, their gradients, frozen copies
  int64_t copies = 0;    // bf16 copies of the product weights products read

  int64_t Total() const {
    return weights + gradients + master + moments + adapters + copies;
  }
};

// The state of the rank at `coordinates` of plan.grid.
StateBytes RankStateBytes(const PlanJob& job, const SplitPlan& plan,
                          const RankCoordinates& coordinates);

// The largest RankStateBytes (by Total) over the ranks of pp rank `pp_rank`.
StateBytes PipelineRankStateBytes(const PlanJob& job, const SplitPlan& plan,
                                  int pp_rank);

}  // namespace glm

#endif  // GLM_PLANNER_RANK_STATE_H_
