// The cuDNN attention's query-key pairs a call (PlanJob::
// attention_pairs_per_call) at which a job fits its GPU. A GPU rank's
// per-head attention backward holds scratch in proportion to its largest
// call's pairs (about 40 bytes a pair: 10 GiB at the default 2^28), and
// smaller calls cost time (16k: 13% of the step at 2^25, bench/NOTES.md), so
// a worker lowers the pairs only as far as its device needs.
#ifndef GLM_PLANNER_ATTENTION_CAP_H_
#define GLM_PLANNER_ATTENTION_CAP_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "planner/hardware.h"
#include "planner/plan_job.h"
#include "planner/split.h"

namespace glm {

// Below this a call's queries at 64k keys are 256: more launches than the
// scratch they save is worth.
constexpr int64_t kMinFittedAttentionPairsPerCall = int64_t{1} << 24;

struct FittedAttentionPairs {
  int64_t pairs_per_call = 0;  // what the rank should run
  int64_t peak_bytes = 0;      // the busiest rank's predicted peak at it
  int64_t job_peak_bytes = 0;  // at the job's own attention_pairs_per_call
  bool fits = false;           // whether peak_bytes fits the device
};

// The job's attention_pairs_per_call where the plan's busiest rank is
// predicted to fit `device` with it (or the job has no per-head attention
// to cut); else the largest of its halvings, down to
// kMinFittedAttentionPairsPerCall, that fits; else that smallest one, with
// fits false (the job needs more than smaller calls: more devices or a
// shorter sequence).
absl::StatusOr<FittedAttentionPairs> FitAttentionPairsPerCall(
    PlanJob job, const SplitPlan& plan, const DeviceSpec& device);

}  // namespace glm

#endif  // GLM_PLANNER_ATTENTION_CAP_H_
