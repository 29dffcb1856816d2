// The order of Megatron's pipeline schedules for one pp rank. Without virtual
// stages, 1F1B: after pp - rank - 1 warm-up forwards, each forward is followed
// by the backward of the oldest micro batch in flight, then the remaining
// backwards. With V virtual stages (chunks) per rank, the interleaved 1F1B:
// forwards walk the chunks in groups of pp micro batches, backwards walk them
// in reverse, after (pp - rank - 1) * 2 + (V - 1) * pp warm-up forwards.
#ifndef GLM_PARALLEL_PIPELINE_ORDER_H_
#define GLM_PARALLEL_PIPELINE_ORDER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

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

}  // namespace glm

#endif  // GLM_PARALLEL_PIPELINE_ORDER_H_
