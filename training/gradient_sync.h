// Data-parallel gradient reduction: every rank's gradients summed over the
// group, packed into one flat buffer so that a step costs one collective
// rather than one per tensor.
#ifndef GLM_TRAINING_GRADIENT_SYNC_H_
#define GLM_TRAINING_GRADIENT_SYNC_H_

#include <vector>

#include "absl/status/status.h"
#include "parallel/collectives.h"
#include "training/adamw.h"

namespace glm {

// In place: each gradient becomes the sum of that gradient over `group`.
absl::Status AllReduceGradients(Collectives& group,
                                const std::vector<TrainableTensor>& params);

}  // namespace glm

#endif  // GLM_TRAINING_GRADIENT_SYNC_H_
