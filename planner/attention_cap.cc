#include "planner/attention_cap.h"

#include <algorithm>
#include <vector>

#include "planner/rank_memory.h"

namespace glm {
namespace {

// The largest peak of the plan's pipeline ranks.
absl::StatusOr<int64_t> BusiestPeak(const PlanJob& job, const SplitPlan& plan,
                                    const DeviceSpec& device) {
  absl::StatusOr<std::vector<RankMemory>> memory =
      SplitMemory(job, plan, device);
  if (!memory.ok()) return memory.status();
  int64_t peak = 0;
  for (const RankMemory& rank : *memory) peak = std::max(peak, rank.Peak());
  return peak;
}

}  // namespace

absl::StatusOr<FittedAttentionPairs> FitAttentionPairsPerCall(
    PlanJob job, const SplitPlan& plan, const DeviceSpec& device) {
  absl::StatusOr<int64_t> peak = BusiestPeak(job, plan, device);
  if (!peak.ok()) return peak.status();
  FittedAttentionPairs fitted{job.attention_pairs_per_call, *peak, *peak,
                              *peak <= device.memory_bytes};
  while (!fitted.fits &&
         job.attention_pairs_per_call / 2 >= kMinFittedAttentionPairsPerCall) {
    job.attention_pairs_per_call /= 2;
    peak = BusiestPeak(job, plan, device);
    if (!peak.ok()) return peak.status();
    fitted.pairs_per_call = job.attention_pairs_per_call;
    fitted.peak_bytes = *peak;
    fitted.fits = *peak <= device.memory_bytes;
  }
  return fitted;
}

}  // namespace glm
