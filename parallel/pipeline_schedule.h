// Megatron's 1F1B pipeline schedule for one stage (no virtual stages): after
// pp - rank - 1 warm-up forwards, each forward is followed by the backward of
// the oldest micro batch in flight, then the remaining backwards. Hidden
// states go to the next stage and their gradients come back over the pipeline
// group (whose rank is the pp rank); sends run on a thread of their own so
// that a stage sending forward and its neighbour sending backward cannot wait
// on each other.
#ifndef GLM_PARALLEL_PIPELINE_SCHEDULE_H_
#define GLM_PARALLEL_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "model/glm_model.h"
#include "parallel/collectives.h"
#include "parallel/stage_model.h"

namespace glm {

// Runs `micro_batches` micro batches (`micro_batch(m)` gives batch m, the
// same on every stage) through `stage`, accumulating its weight gradients.
// Returns the sums over micro batches of what the stage computed.
absl::StatusOr<StageLosses> RunOneForwardOneBackward(
    StageModel& stage, Collectives& pipeline, int64_t micro_batches,
    const std::function<Batch(int64_t)>& micro_batch);

}  // namespace glm

#endif  // GLM_PARALLEL_PIPELINE_SCHEDULE_H_
