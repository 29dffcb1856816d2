// Learning-rate schedule as Megatron's OptimizerParamScheduler computes it:
// linear warmup from 0 to `max_lr` over `warmup_iters`, then cosine decay to
// `min_lr` at `decay_iters`, then constant `min_lr`.
#ifndef GLM_TRAINING_LR_SCHEDULE_H_
#define GLM_TRAINING_LR_SCHEDULE_H_

#include <cstdint>

#include "absl/status/status.h"

namespace glm {

struct LrSchedule {
  double max_lr = 0;
  double min_lr = 0;
  int64_t warmup_iters = 0;
  int64_t decay_iters = 0;

  // InvalidArgument naming the field when the schedule is inconsistent.
  absl::Status Validate() const;
  // The learning rate of 1-indexed `iteration`: warmup reaches max_lr at
  // iteration == warmup_iters.
  double At(int64_t iteration) const;
};

}  // namespace glm

#endif  // GLM_TRAINING_LR_SCHEDULE_H_
