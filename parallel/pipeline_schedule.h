// Runs Megatron's pipeline schedules (PipelineOrder) for one pp rank.
//
// Chunk c of pp rank r is global stage c * pp + r. Hidden states go to the
// next stage over the forward group and their gradients come back over the
// backward group (both the pipeline group, rank = pp rank; two groups so that
// the two directions queue apart). Sends are posted without waiting, so no
// two stages wait on each other's sends.
#ifndef GLM_PARALLEL_PIPELINE_SCHEDULE_H_
#define GLM_PARALLEL_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/collectives.h"
#include "model/glm_model.h"
#include "parallel/pipeline_order.h"
#include "parallel/stage_model.h"

namespace glm {

// Runs `micro_batches` micro batches (`micro_batch(m)` gives batch m, the
// same on every rank) through this rank's `chunks` (in virtual-chunk order),
// accumulating their weight gradients. Returns the sums over micro batches of
// what the chunks computed.
absl::StatusOr<StageLosses> RunPipelineSchedule(
    const std::vector<StageModel*>& chunks, Collectives& forward,
    Collectives& backward, int64_t micro_batches,
    const std::function<Batch(int64_t)>& micro_batch);

}  // namespace glm

#endif  // GLM_PARALLEL_PIPELINE_SCHEDULE_H_
