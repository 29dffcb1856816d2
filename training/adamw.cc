#include "training/adamw.h"

#include <cassert>

namespace glm {

bool TakesWeightDecay(const Tensor& value) { return value.shape().size() > 1; }

void AdamW::Step(Backend& backend, const std::vector<TrainableTensor>& params,
                 double lr, double grad_scale) {
  ++steps_;
  AdamWHyperparameters hyper;
  hyper.lr = lr;
  hyper.beta1 = options_.beta1;
  hyper.beta2 = options_.beta2;
  hyper.eps = options_.eps;
  hyper.weight_decay = options_.weight_decay;
  hyper.grad_scale = grad_scale;
  hyper.step = steps_;
  std::vector<AdamWTensor> tensors;
  for (const TrainableTensor& param : params) {
    assert(param.grad->numel() == param.value->numel());
    AdamMoments& moments = MomentsOf(param);
    tensors.push_back({param.value->data(), param.grad->data(),
                       moments.exp_avg.data(), moments.exp_avg_sq.data(),
                       param.value->numel(), TakesWeightDecay(*param.value)});
  }
  backend.AdamWStep(hyper, tensors);
}

AdamMoments& AdamW::MomentsOf(const TrainableTensor& param) {
  AdamMoments& moments = moments_[param.name];
  if (moments.exp_avg.numel() != param.value->numel()) {
    moments.exp_avg = Tensor(param.value->shape(), param.value->allocator());
    moments.exp_avg_sq = Tensor(param.value->shape(), param.value->allocator());
  }
  return moments;
}

void AdamW::ReleaseMomentsExcept(const std::set<std::string>& kept) {
  for (auto it = moments_.begin(); it != moments_.end();) {
    it = kept.count(it->first) > 0 ? std::next(it) : moments_.erase(it);
  }
}

}  // namespace glm
