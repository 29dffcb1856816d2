// Gradient sums under expert parallelism. A routed expert lives on one ep rank
// (and its expert-data-parallel replicas), and only there does its gradient
// come out of the backward pass (zero on the other ep ranks). So the routed
// experts' gradients are summed over the expert-data-parallel group, every
// other gradient over the data-parallel group as without experts (the global
// norm then adds the dense part once and each ep rank's experts once:
// training/trainer.cc).
#ifndef GLM_TRAINING_EXPERT_GRADIENTS_H_
#define GLM_TRAINING_EXPERT_GRADIENTS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/collectives.h"
#include "model/parameters.h"
#include "training/adamw.h"

namespace glm {

struct ExpertSplit {
  std::vector<TrainableTensor> dense;    // everything but the routed experts
  std::vector<TrainableTensor> experts;  // fused [E, ...] routed experts
};

// Splits `trainable` (tensors of `params`) into routed experts and the rest,
// each in the order given.
ExpertSplit SplitRoutedExperts(const ModelParameters& params,
                               const std::vector<TrainableTensor>& trainable);

// Dense gradients summed over `data_parallel`, expert gradients over
// `expert_data` (null: the experts have no replicas).
absl::Status AllReduceExpertParallelGradients(Collectives& data_parallel,
                                              Collectives* expert_data,
                                              const ExpertSplit& split);

}  // namespace glm

#endif  // GLM_TRAINING_EXPERT_GRADIENTS_H_
