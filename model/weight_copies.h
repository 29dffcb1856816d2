// Which of a model's tensors products read as weights, handed to the backend
// that keeps rounded copies of them (Backend::RefreshComputeCopies), and the
// bytes those copies take.
#ifndef GLM_MODEL_WEIGHT_COPIES_H_
#define GLM_MODEL_WEIGHT_COPIES_H_

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "model/parameters.h"

namespace glm {

// Whether products read `named`, a tensor of `params`' Named(), as a weight,
// held or not: every tensor of two or more dimensions (projections, stacked
// experts, routers, the output head), except the token embedding when it is
// not also the output head: a table the forward gathers rows from, never a
// product's operand.
bool IsProductWeight(const ModelParameters& params, const NamedTensor& named);

// The values of every held product weight (IsProductWeight), in Named()
// order.
std::vector<ConstFloatSpan> ProductWeights(ModelParameters& params);

// The bytes of the one allocation in which a backend computing in bf16 (the
// CUDA backend's bf16 mode) keeps its copies of `params`' product weights
// (kernels/bf16_copy_layout.h); 0 for a backend that keeps none.
int64_t ProductWeightCopyBytes(ModelParameters& params);

// Makes `backend`'s copies of `params`' product weights current: call after
// the weights change other than by the backend's AdamWStep (which keeps the
// copies of what it updates) and before the next forward.
void RefreshComputeCopies(Backend& backend, ModelParameters& params);

}  // namespace glm

#endif  // GLM_MODEL_WEIGHT_COPIES_H_
