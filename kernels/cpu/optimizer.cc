#include "kernels/cpu/optimizer.h"

#include <cmath>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {

double SquaredSum(const std::vector<ConstFloatSpan>& spans) {
  double sum = 0;
  for (const ConstFloatSpan& span : spans) {
    for (int64_t i = 0; i < span.size; ++i) {
      sum += static_cast<double>(span.data[i]) * span.data[i];
    }
  }
  return sum;
}

void AdamWStep(const AdamWHyperparameters& h,
               const std::vector<AdamWTensor>& tensors) {
  const double b1 = h.beta1, b2 = h.beta2;
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(h.step));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(h.step));
  const double step_size = h.lr / correction1;
  const double sqrt_correction2 = std::sqrt(correction2);
  for (const AdamWTensor& t : tensors) {
    const double decay = t.weight_decay ? h.lr * h.weight_decay : 0.0;
    ParallelFor(t.size, t.size * 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const double grad = static_cast<double>(t.grad[i]) * h.grad_scale;
        float& m = t.exp_avg[i];
        float& v = t.exp_avg_sq[i];
        m = static_cast<float>(b1 * m + (1.0 - b1) * grad);
        v = static_cast<float>(b2 * v + (1.0 - b2) * grad * grad);
        const double denom =
            std::sqrt(static_cast<double>(v)) / sqrt_correction2 + h.eps;
        const double decayed = t.value[i] - decay * t.value[i];
        t.value[i] = static_cast<float>(decayed - step_size * m / denom);
      }
    });
  }
}

}  // namespace glm::cpu
