// How many query-key pairs a GPU rank's cuDNN attention call takes
// (kernels/attention_pairs.h), chosen so that a long sequence fits the
// worker's GPU without the user naming a number.
#ifndef GLM_WORKER_ATTENTION_PAIRS_CHOICE_H_
#define GLM_WORKER_ATTENTION_PAIRS_CHOICE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend_factory.h"
#include "proto/job_spec.pb.h"
#include "training/trainer.h"

namespace glm {

struct AttentionPairsChoice {
  int64_t pairs_per_call = 0;
  std::string note;  // a line for the log; empty when the default stands
};

// GLM_ATTENTION_PAIRS_PER_CALL where it is set. Else, on a GPU, for a job of
// one model per rank (tp, pp, cp and ep 1), the largest halving of the
// default at which `glmctl plan`'s model of the rank fits `device`'s memory
// (planner/attention_cap.h), with a note when it is below the default (the
// fewest tried, and a warning, when none fits); else the default. The planner
// overestimated every measured peak by 1-7%, so a fitted choice leaves room. A
// planner that cannot model the job leaves the default, with a note saying why.
absl::StatusOr<AttentionPairsChoice> ChooseAttentionPairsPerCall(
    const v1::JobSpec& spec, const TrainerOptions& options,
    const DeviceDescription& device);

}  // namespace glm

#endif  // GLM_WORKER_ATTENTION_PAIRS_CHOICE_H_
