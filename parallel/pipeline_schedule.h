// Megatron's pipeline schedules for one pp rank. Without virtual stages,
// 1F1B: after pp - rank - 1 warm-up forwards, each forward is followed by the
// backward of the oldest micro batch in flight, then the remaining
// backwards. With V virtual stages (chunks) per rank, the interleaved 1F1B:
// forwards walk the chunks in groups of pp micro batches, backwards walk them
// in reverse, after (pp - rank - 1) * 2 + (V - 1) * pp warm-up forwards.
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
#include "model/glm_model.h"
#include "parallel/collectives.h"
#include "parallel/stage_model.h"

namespace glm {

struct PipelineOp {
  bool forward = true;
  int chunk = 0;
  int64_t micro_batch = 0;
};

// The order in which pp rank `rank` runs its forwards and backwards.
// INVALID_ARGUMENT when chunks > 1 and micro_batches is not a multiple of pp
// (the interleaved schedule needs whole groups).
absl::StatusOr<std::vector<PipelineOp>> PipelineOrder(int pp, int rank,
                                                      int chunks,
                                                      int64_t micro_batches);

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
