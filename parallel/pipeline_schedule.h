// Runs Megatron's pipeline schedules (PipelineOrder) for one pp rank.
//
// Chunk c of pp rank r is global stage c * pp + r. Hidden states go to the
// next stage and their gradients come back over the rank's pipeline links
// (parallel/pipeline_edges.h). Sends are posted without waiting, so no two
// stages wait on each other's sends.
#ifndef GLM_PARALLEL_PIPELINE_SCHEDULE_H_
#define GLM_PARALLEL_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/collectives.h"
#include "kernels/device_memory.h"
#include "model/glm_model.h"
#include "parallel/pipeline_edges.h"
#include "parallel/pipeline_order.h"
#include "parallel/stage_model.h"

namespace glm {

// Runs `micro_batches` micro batches (`micro_batch(m)` gives batch m, the
// same on every rank) through this rank's `chunks` (in virtual-chunk order),
// accumulating their weight gradients. Received hidden states and gradients
// land in `buffers`' memory (null: the host's), where every link's group
// must take them, and so must the stages' outputs. Returns the sums over
// micro batches of what the chunks computed.
absl::StatusOr<StageLosses> RunPipelineSchedule(
    const std::vector<StageModel*>& chunks, const PipelineLinks& links,
    Allocator* buffers, int64_t micro_batches,
    const std::function<Batch(int64_t)>& micro_batch);

}  // namespace glm

#endif  // GLM_PARALLEL_PIPELINE_SCHEDULE_H_
