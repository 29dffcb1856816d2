// Validation of a submitted job spec, whole: the model config, the rank grid,
// the pipeline layout (with the index-sharing rule), training and data fields.
// The result is the plan the scheduler assigns ranks from, so what was
// validated is what runs.
#ifndef GLM_COORDINATOR_JOB_SPEC_VALIDATOR_H_
#define GLM_COORDINATOR_JOB_SPEC_VALIDATOR_H_

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
// the rule.
absl::StatusOr<JobPlan> ValidateJobSpec(const v1::JobSpec& spec);

// A parallel size as the spec means it: 0 (unset) is 1.
int ParallelSize(int value);

}  // namespace glm

#endif  // GLM_COORDINATOR_JOB_SPEC_VALIDATOR_H_
