// Time of one training step. Per micro batch, each pp rank runs its stages'
// layers: FLOPs from training/flops.h (Megatron's count with the DSA term)
// split over the rank's tensor, context and expert shares, at the kernel
// rates of planner/kernel_rates.h. Attention and the indexer are priced as
// the store's trainer runs them: this trainer's per-head attention over
// every causal key, latent attention reading each query's selected rows,
// indexer scores over every causal key and its KL loss dense or over the
// selected keys; Megatron's sparse kernels over the selected keys. Memory-
// bound work is three passes over the activations the layers form and one
// more over what recomputation forms again; the collectives inside the
// layers (tensor-parallel all-gathers and reduce-scatters, context-parallel
// key gathers, expert all-to-alls) run over the links their groups span, not
// overlapped. The pipeline runs (m + (pp - 1) / vpp) micro-batch times of
// its slowest rank (Narayanan et al., 2021: the bubble shrinks with virtual
// stages); then the data-parallel gradient and weight exchange (partly
// hidden in Megatron) and the optimizer, memory-bound.
#ifndef GLM_PLANNER_STEP_TIME_H_
#define GLM_PLANNER_STEP_TIME_H_

#include <vector>

#include "absl/status/statusor.h"
#include "planner/hardware.h"
#include "planner/kernel_rates.h"
#include "planner/plan_job.h"
#include "planner/rank_memory.h"
#include "planner/split.h"

namespace glm {

// Seconds of one micro batch on one pp rank (forward and backward, every
// stage of the rank), by term.
struct MicroBatchTime {
  double gemm = 0;          // projections, dense MLP, shared experts, logits
  double experts = 0;       // routed experts
  double attention = 0;     // attention core
  double indexer = 0;       // DSA indexer scores and top-k
  double indexer_loss = 0;  // the indexer's KL loss and its gradients
  double recompute = 0;     // forward work redone in backward
  double memory = 0;        // memory-bound passes
  double tensor_parallel = 0;
  double context_parallel = 0;
  double expert_parallel = 0;
  double pipeline_send = 0;

  // The kernels' share, without the collectives.
  double Compute() const {
    return gemm + experts + attention + indexer + indexer_loss + recompute +
           memory;
  }
  double Total() const {
    return Compute() + tensor_parallel + context_parallel + expert_parallel +
           pipeline_send;
  }
};

struct StepTime {
  // The slowest pp rank's micro batch, times the micro batches.
  MicroBatchTime slowest;
  int slowest_pp_rank = 0;
  double micro_batches = 0;
  double bubble = 0;         // (pp - 1) / vpp micro-batch times
  double data_parallel = 0;  // exposed gradient and weight exchange
  double optimizer = 0;
  double model_flops = 0;  // training/flops.h, whole step

  double Total() const {
    return slowest.Total() * micro_batches + bubble + data_parallel + optimizer;
  }
  double TflopsPerDevice(int world) const {
    return model_flops / Total() / world / 1e12;
  }
};

// `memory` is SplitMemory's result for the same plan (the optimizer's work
// follows the state each rank updates).
absl::StatusOr<StepTime> PredictStepTime(const PlanJob& job,
                                         const SplitPlan& plan,
                                         const ClusterSpec& cluster,
                                         const KernelRates& rates,
                                         const std::vector<RankMemory>& memory);

}  // namespace glm

#endif  // GLM_PLANNER_STEP_TIME_H_
