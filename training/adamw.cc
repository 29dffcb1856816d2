#include "training/adamw.h"

#include <cassert>
#include <cmath>

namespace glm {

bool TakesWeightDecay(const Tensor& value) { return value.shape().size() > 1; }

void AdamW::Step(const std::vector<TrainableTensor>& params, double lr,
                 double grad_scale) {
  ++steps_;
  for (const TrainableTensor& param : params) {
    Update(param, &MomentsOf(param), lr, grad_scale);
  }
}

AdamMoments& AdamW::MomentsOf(const TrainableTensor& param) {
  AdamMoments& moments = moments_[param.name];
  if (moments.exp_avg.numel() != param.value->numel()) {
    moments.exp_avg = Tensor(param.value->shape());
    moments.exp_avg_sq = Tensor(param.value->shape());
  }
  return moments;
}

void AdamW::Update(const TrainableTensor& param, AdamMoments* moments,
                   double lr, double grad_scale) const {
  assert(param.grad->numel() == param.value->numel());
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(steps_));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(steps_));
  const double decay =
      TakesWeightDecay(*param.value) ? lr * options_.weight_decay : 0.0;
  const double step_size = lr / correction1;
  const double sqrt_correction2 = std::sqrt(correction2);
  float* w = param.value->data();
  const float* g = param.grad->data();
  float* m = moments->exp_avg.data();
  float* v = moments->exp_avg_sq.data();
  for (int64_t i = 0; i < param.value->numel(); ++i) {
    const double grad = static_cast<double>(g[i]) * grad_scale;
    m[i] = static_cast<float>(b1 * m[i] + (1.0 - b1) * grad);
    v[i] = static_cast<float>(b2 * v[i] + (1.0 - b2) * grad * grad);
    const double denom =
        std::sqrt(static_cast<double>(v[i])) / sqrt_correction2 + options_.eps;
    const double decayed = w[i] - decay * w[i];
    w[i] = static_cast<float>(decayed - step_size * m[i] / denom);
  }
}

}  // namespace glm
