// One split of a job on a cluster, evaluated: every pp rank's peak memory
// and the step time, and whether the busiest rank fits its device.
#ifndef GLM_PLANNER_EVALUATION_H_
#define GLM_PLANNER_EVALUATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/hardware.h"
#include "planner/kernel_rates.h"
#include "planner/plan_job.h"
#include "planner/rank_memory.h"
#include "planner/split.h"
#include "planner/step_time.h"

namespace glm {

struct Evaluation {
  PlanJob job;  // the job as evaluated (its recomputation may be searched)
  SplitPlan plan;
  std::vector<RankMemory> memory;  // per pp rank
  StepTime time;

  // The pp rank with the largest peak, and that peak.
  const RankMemory& Busiest() const;
  int64_t PeakBytes() const { return Busiest().Peak(); }
  bool Fits(const DeviceSpec& device) const {
    return PeakBytes() <= device.memory_bytes;
  }
};

// Memory only (the time left empty) when `with_time` is false, for a
// search that drops what does not fit before timing it (AddStepTime).
absl::StatusOr<Evaluation> Evaluate(const PlanJob& job, const SplitPlan& plan,
                                    const ClusterSpec& cluster,
                                    const KernelRates& rates,
                                    bool with_time = true);
absl::Status AddStepTime(const ClusterSpec& cluster, const KernelRates& rates,
                         Evaluation* evaluation);

}  // namespace glm

#endif  // GLM_PLANNER_EVALUATION_H_
