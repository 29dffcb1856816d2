#include "cli/step_rate.h"

#include <algorithm>

namespace glm {

void StepRate::Observe(int64_t iteration, absl::Time now,
                       absl::Duration step_time) {
  if (last_time_ && iteration > last_iteration_) {
    const double seconds = absl::ToDoubleSeconds(now - *last_time_) /
                           static_cast<double>(iteration - last_iteration_);
    seconds_per_step_ =
        measured_ ? (1 - weight_) * *seconds_per_step_ + weight_ * seconds
                  : seconds;
    measured_ = true;
  } else if (!seconds_per_step_ && step_time > absl::ZeroDuration()) {
    seconds_per_step_ = absl::ToDoubleSeconds(step_time);
  }
  if (!last_time_ || iteration > last_iteration_) {
    last_iteration_ = iteration;
    last_time_ = now;
  }
}

std::optional<absl::Duration> StepRate::Remaining(int64_t total) const {
  if (!seconds_per_step_) return std::nullopt;
  const int64_t left = std::max<int64_t>(0, total - last_iteration_);
  return absl::Seconds(*seconds_per_step_ * static_cast<double>(left));
}

}  // namespace glm
