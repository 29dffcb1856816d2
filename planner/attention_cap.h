// The cuDNN attention's query-key pairs a call (PlanJob::
// attention_pairs_per_call) at which a job fits its GPU. A GPU rank's
// per-head attention backward holds scratch in proportion to its largest
// call's pairs (about 40 bytes a pair: 10 GiB at the default 2^28), and
// smaller calls cost time (16k: 13% of the step at 2^25, bench/NOTES.md), so
// a worker lowers the pairs only as far as its device needs.
#ifndef GLM_PLANNER_ATTENTION_CAP_H_
#define GLM_PLANNER_ATTENTION_CAP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/hardware.h"
#include "planner/plan_job.h"
#include "planner/rank_memory.h"
#include "planner/split.h"

namespace glm {

// Below this a call's queries at 64k keys are 256: more launches than the
// scratch they save is worth.
constexpr int64_t kMinFittedAttentionPairsPerCall = int64_t{1} << 24;

struct FittedAttentionPairs {
  int64_t pairs_per_call = 0;      // what the rank should run
  std::vector<RankMemory> memory;  // every pp rank's at pairs_per_call
  int64_t job_peak_bytes = 0;      // the busiest rank's at the job's own pairs
  bool fits = false;               // whether PeakBytes() fits the device

  // The busiest rank's predicted peak at pairs_per_call.
  int64_t PeakBytes() const;
};

// Whether a worker fits the attention's pairs a call of `split` to its
// device where `job` asks it to (PlanJob::fit_attention_pairs): this
// trainer's store on GPUs, one model per rank (RunsAsOneModel, ep 1).
bool FitsAttentionPairs(const PlanJob& job, const Split& split);

// The job's attention_pairs_per_call where the plan's busiest rank is
// predicted to fit `device` with it; else the largest of its halvings, down
// to kMinFittedAttentionPairsPerCall, that fits; else that smallest one,
// with fits false (the job needs more than smaller calls: more devices or a
// shorter sequence).
absl::StatusOr<FittedAttentionPairs> FitAttentionPairsPerCall(
    PlanJob job, const SplitPlan& plan, const DeviceSpec& device);

}  // namespace glm

#endif  // GLM_PLANNER_ATTENTION_CAP_H_
