#include "training/lr_schedule.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace glm {

absl::Status LrSchedule::Validate() const {
  if (max_lr <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.lr: must be > 0, got ", max_lr));
  }
  if (min_lr < 0 || min_lr > max_lr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.min_lr: must be in [0, lr=", max_lr, "], got ", min_lr));
  }
  if (warmup_iters < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.warmup_iters: must be >= 0, got ", warmup_iters));
  }
  if (decay_iters < warmup_iters) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.lr_decay_iters: must be >= warmup_iters (",
                     warmup_iters, "), got ", decay_iters));
  }
  return absl::OkStatus();
}

double LrSchedule::At(int64_t iteration) const {
  if (warmup_iters > 0 && iteration <= warmup_iters) {
    return max_lr * static_cast<double>(iteration) / warmup_iters;
  }
  if (iteration >= decay_iters) return min_lr;
  const double ratio = static_cast<double>(iteration - warmup_iters) /
                       static_cast<double>(decay_iters - warmup_iters);
  const double coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace glm
