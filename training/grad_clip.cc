#include "training/grad_clip.h"

#include <algorithm>
#include <cmath>

namespace glm {

double GradSquaredSum(Backend& backend,
                      const std::vector<TrainableTensor>& params) {
  std::vector<ConstFloatSpan> grads;
  for (const TrainableTensor& param : params) {
    grads.push_back({param.grad->data(), param.grad->numel()});
  }
  return backend.SquaredSum(grads);
}

double GlobalNorm(double squared_sum) { return std::sqrt(squared_sum); }

double ClipScale(double global_norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(global_norm)) return 1.0;
  return std::min(1.0, max_norm / (global_norm + 1e-6));
}

}  // namespace glm
