// Data-parallel gradient reduction: every rank's gradients summed over the
// group, packed into one flat buffer so that a step costs one collective
// rather than one per tensor.
#ifndef GLM_TRAINING_GRADIENT_SYNC_H_
#define GLM_TRAINING_GRADIENT_SYNC_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/collectives.h"
#include "training/adamw.h"

namespace glm {

// In place: each gradient becomes the sum of that gradient over `group`.
absl::Status AllReduceGradients(Collectives& group,
                                const std::vector<TrainableTensor>& params);

// The sum of every member's `value`, the same on each: the values travel as
// the bytes of a double (gathered, never added as floats) and are added in
// rank order, as precise as one process's sum. A float sum of gradient norms
// would move the clipping scale by about 1e-7, enough to flip a top-k or
// routing choice a few steps later.
absl::StatusOr<double> SumInRankOrder(Collectives& group, double value);

}  // namespace glm

#endif  // GLM_TRAINING_GRADIENT_SYNC_H_
