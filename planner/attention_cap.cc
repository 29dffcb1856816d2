#include "planner/attention_cap.h"

#include <algorithm>

#include "planner/activation_memory.h"

namespace glm {

int64_t FittedAttentionPairs::PeakBytes() const {
  int64_t peak = 0;
  for (const RankMemory& rank : memory) peak = std::max(peak, rank.Peak());
  return peak;
}

bool FitsAttentionPairs(const PlanJob& job, const Split& split) {
  return job.fit_attention_pairs && IsTrainerStore(job.precision) &&
         job.device == RankDevice::kGpu && RunsAsOneModel(split) &&
         split.ep == 1;
}

absl::StatusOr<FittedAttentionPairs> FitAttentionPairsPerCall(
    PlanJob job, const SplitPlan& plan, const DeviceSpec& device) {
  FittedAttentionPairs fitted;
  while (true) {
    absl::StatusOr<std::vector<RankMemory>> memory =
        SplitMemory(job, plan, device);
    if (!memory.ok()) return memory.status();
    fitted.pairs_per_call = job.attention_pairs_per_call;
    fitted.memory = *std::move(memory);
    const int64_t peak = fitted.PeakBytes();
    if (fitted.job_peak_bytes == 0) fitted.job_peak_bytes = peak;
    fitted.fits = peak <= device.memory_bytes;
    if (fitted.fits ||
        job.attention_pairs_per_call / 2 < kMinFittedAttentionPairsPerCall) {
      return fitted;
    }
    job.attention_pairs_per_call /= 2;
  }
}

}  // namespace glm
