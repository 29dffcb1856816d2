// Activations of one pp rank over its pipeline schedule: the micro batches
// whose forward ran and whose backward has not (parallel/pipeline_schedule.h
// gives the order), their saved activations, the transient of the pass that
// runs at the peak, and, in this trainer, the stage outputs and input
// gradients it sent, which stay alive until the step's sends are waited
// for at its end.
#ifndef GLM_PLANNER_PIPELINE_MEMORY_H_
#define GLM_PLANNER_PIPELINE_MEMORY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/activation_memory.h"

namespace glm {

// One of the rank's stages (virtual chunks, in chunk order).
struct ChunkMemory {
  int64_t saved = 0;      // per micro batch
  int64_t transient = 0;  // on top while it runs
  // Held after its forward (the output sent on) and after its backward (the
  // input gradient sent back), per micro batch.
  int64_t sent_forward = 0;
  int64_t sent_backward = 0;
};

struct SchedulePeak {
  int64_t activations = 0;  // saved activations in flight at the peak
  int64_t transient = 0;
  int64_t sent = 0;
  int in_flight = 0;  // micro batches in flight at the peak
  int64_t Total() const { return activations + transient + sent; }
};

// The largest moment of pp rank `rank` of `pp` running `micro_batches`
// micro batches through `chunks`.
absl::StatusOr<SchedulePeak> PipelineSchedulePeak(
    int pp, int rank, const std::vector<ChunkMemory>& chunks,
    int64_t micro_batches);

}  // namespace glm

#endif  // GLM_PLANNER_PIPELINE_MEMORY_H_
