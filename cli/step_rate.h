// How fast a job advances, for `glmctl watch`'s ETA: an exponential moving
// average of wall-clock seconds per iteration between the metrics a watcher
// sees (checkpoint saves and evaluation pauses included, which a step's own
// time leaves out). Until two observations give a wall-clock rate, the first
// step's own time stands in. One slow or fast step moves the ETA by a
// fraction only.
#ifndef GLM_CLI_STEP_RATE_H_
#define GLM_CLI_STEP_RATE_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"

namespace glm {

class StepRate {
 public:
  // `weight` is the share of each new observation in the average.
  explicit StepRate(double weight = 0.2) : weight_(weight) {}

  // The job reached `iteration` at `now`; `step_time` is that step's own time
  // (used until two observations give a wall-clock rate).
  void Observe(int64_t iteration, absl::Time now, absl::Duration step_time);

  // Time left for the iterations up to `total`; nullopt before any rate.
  std::optional<absl::Duration> Remaining(int64_t total) const;

 private:
  double weight_;
  std::optional<double> seconds_per_step_;
  // False while the estimate is only the first step's own time.
  bool measured_ = false;
  int64_t last_iteration_ = 0;
  std::optional<absl::Time> last_time_;
};

}  // namespace glm

#endif  // GLM_CLI_STEP_RATE_H_
