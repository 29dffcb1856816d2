// The GLM-5.2 runs the project's seed documents record (Megatron-Bridge's
// verification cards, /work/shared/seeds/): each with its cluster, split,
// batch and what was reported, to hold the planner's predictions against.
#ifndef GLM_PLANNER_SEED_RUNS_H_
#define GLM_PLANNER_SEED_RUNS_H_

#include <string>
#include <vector>

#include "planner/hardware.h"
#include "planner/plan_job.h"
#include "planner/split.h"

namespace glm {

struct SeedRun {
  std::string name;
  ClusterSpec cluster;
  int world = 0;
  Split split;
  // job.recompute is what the card states, when it states it.
  PlanJob job;
  bool recompute_stated = false;
  // Reported: last-10-step averages, and the peak GPU memory where the
  // card gives it (0: not reported).
  double step_ms = 0;
  double tflops_per_gpu = 0;
  double tokens_per_gpu = 0;
  double peak_mib = 0;
  // What the card does not say and the entry assumes.
  std::string assumed;
};

std::vector<SeedRun> SeedRuns();

}  // namespace glm

#endif  // GLM_PLANNER_SEED_RUNS_H_
