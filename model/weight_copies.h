// Which of a model's tensors products read as weights, handed to the backend
// that keeps rounded copies of them (Backend::RefreshComputeCopies).
#ifndef GLM_MODEL_WEIGHT_COPIES_H_
#define GLM_MODEL_WEIGHT_COPIES_H_

#include <vector>

#include "kernels/backend.h"
#include "model/parameters.h"

namespace glm {

// The values of every held tensor of two or more dimensions (projections,
// stacked experts, routers, the output head), except the token embedding when
// it is not also the output head: a table the forward gathers rows from,
// never a product's operand.
std::vector<FlatSpan> ProductWeights(ModelParameters& params);

// Makes `backend`'s copies of `params`' product weights current: call after
// the weights change other than by the backend's AdamWStep (which keeps the
// copies of what it updates) and before the next forward.
void RefreshComputeCopies(Backend& backend, ModelParameters& params);

}  // namespace glm

#endif  // GLM_MODEL_WEIGHT_COPIES_H_
