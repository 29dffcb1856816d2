// What a job may be: every rule a job spec must meet to run, decided in one
// place. The coordinator applies them when a job is submitted (so a refusal
// comes at once, naming the field, not minutes later from a worker) and again
// when it plans ranks; glm-worker applies them to its assignment as a final
// check (with the device rules of device_rules.h). Rules that depend on files
// (datasets, checkpoints) are the worker's alone: the coordinator may not see
// the workers' file systems.
#ifndef GLM_JOBSPEC_JOB_SPEC_VALIDATOR_H_
#define GLM_JOBSPEC_JOB_SPEC_VALIDATOR_H_

#include <vector>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "parallel/pipeline_layout.h"
#include "parallel/rank_grid.h"
#include "proto/job_spec.pb.h"

namespace glm {

struct JobPlan {
  ModelConfig model;
  RankGrid grid;
  // Every pipeline stage, virtual chunks included, in stage order.
  std::vector<StageSlice> stages;
};

// The plan of a valid spec; otherwise INVALID_ARGUMENT whose message starts
// with the field path ("parallel.layout: ...", "training.lr: ...") and states
// the rule. The result is the plan the scheduler assigns ranks from and each
// rank trains by, so what was validated is what runs.
absl::StatusOr<JobPlan> ValidateJobSpec(const v1::JobSpec& spec);

// A parallel size as the spec means it: 0 (unset) is 1.
int ParallelSize(int value);

}  // namespace glm

#endif  // GLM_JOBSPEC_JOB_SPEC_VALIDATOR_H_
