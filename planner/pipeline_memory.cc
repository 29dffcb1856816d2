#include "planner/pipeline_memory.h"

#include "parallel/pipeline_order.h"

namespace glm {

absl::StatusOr<SchedulePeak> PipelineSchedulePeak(
    int pp, int rank, const std::vector<ChunkMemory>& chunks,
    int64_t micro_batches) {
  absl::StatusOr<std::vector<PipelineOp>> order =
      PipelineOrder(pp, rank, static_cast<int>(chunks.size()), micro_batches);
  if (!order.ok()) return order.status();
  SchedulePeak peak;
  int64_t saved = 0, sent = 0;
  int in_flight = 0;
  for (const PipelineOp& op : *order) {
    const ChunkMemory& chunk = chunks[op.chunk];
    if (op.forward) {
      saved += chunk.saved;
      ++in_flight;
    }
    // A pass's temporaries come on top of everything in flight, its own
    // micro batch included.
    const SchedulePeak now{saved, chunk.transient, sent, in_flight};
    if (now.Total() > peak.Total()) peak = now;
    if (!op.forward) {
      saved -= chunk.saved;
      --in_flight;
    }
    sent += op.forward ? chunk.sent_forward : chunk.sent_backward;
  }
  return peak;
}

}  // namespace glm
