// Gradients and checkpoint tensors under tensor and context parallelism
// (model/token_parallel.h). A rank's gradients are its tokens' part of the
// whole: a tensor is summed over the context group, and over the tensor group
// unless tensor parallelism splits it (then each rank keeps its part of the
// whole gradient). Checkpoints hold whole tensors, so that they load under
// any tp (and export to HF as they are).
#ifndef GLM_TRAINING_TOKEN_PARALLEL_GRADIENTS_H_
#define GLM_TRAINING_TOKEN_PARALLEL_GRADIENTS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "model/token_parallel.h"
#include "training/adamw.h"

namespace glm {

// In place: the whole model's gradients, as one process computes them.
// `tensor` and `context` are parallel's groups as the gradients' buffers reach
// them (the device's views for a model trained on the device).
absl::Status SumTokenParallelGradients(
    const TokenParallel& parallel, Collectives* tensor, Collectives* context,
    const std::vector<TrainableTensor>& trainable);

// The squared norm of the whole gradients (after SumTokenParallelGradients):
// whole tensors once, split tensors summed over the tensor group in rank
// order (see SumInRankOrder).
absl::StatusOr<double> TokenParallelGradSquaredSum(
    Backend& backend, TokenParallel& parallel,
    const std::vector<TrainableTensor>& trainable);

// The whole tensor of `name` from every tensor rank's `part` (a copy of the
// part when it is not split).
absl::StatusOr<Tensor> GatherTensorParallel(TokenParallel& parallel,
                                            const std::string& name,
                                            const Tensor& part);
// This rank's part of the whole tensor of `name`.
Tensor TensorParallelPartOf(const TokenParallel& parallel,
                            const std::string& name, const Tensor& whole);

}  // namespace glm

#endif  // GLM_TRAINING_TOKEN_PARALLEL_GRADIENTS_H_
