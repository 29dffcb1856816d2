// Gradient reduction and norm for a pp rank that keeps only its stages'
// tensors current (parallel/stage_parameters.h): the pipeline group sums the
// gradients of the tensors read on several ranks (the embedding for MTP or a
// tied head) rather than every gradient of the model; the global norm adds
// each tensor once, on its owning rank (PipelineTensors::owned).
#ifndef GLM_TRAINING_PIPELINE_GRADIENTS_H_
#define GLM_TRAINING_PIPELINE_GRADIENTS_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/collectives.h"
#include "parallel/stage_parameters.h"
#include "training/adamw.h"

namespace glm {

// The entries of `trainable` named in `names`, in `trainable`'s order.
std::vector<TrainableTensor> SelectTrainable(
    const std::vector<TrainableTensor>& trainable,
    const std::set<std::string>& names);

// In place: the gradients of `tensors.shared` become their sums over the pp
// ranks that read each (point to point within `pipeline`, summed in rank
// order by `backend`, where the gradients live); a rank takes part only for
// the tensors it reads. Every rank's gradients of the tensors it uses are
// then the whole model's. `pipeline` takes buffers where the gradients lie.
absl::Status SumSharedGradients(Backend& backend, Collectives& pipeline,
                                const PipelineTensors& tensors,
                                const std::vector<TrainableTensor>& trainable);

}  // namespace glm

#endif  // GLM_TRAINING_PIPELINE_GRADIENTS_H_
