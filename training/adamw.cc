#include "training/adamw.h"

#include <cassert>

#include "kernels/tensor_arena.h"

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
  CreateMissingMoments(params);
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

void AdamW::CreateMissingMoments(const std::vector<TrainableTensor>& params) {
  std::vector<AdamMoments*> missing;
  std::vector<std::vector<int64_t>> shapes;
  Allocator* device = nullptr;
  for (const TrainableTensor& param : params) {
    AdamMoments& moments = moments_[param.name];
    if (param.value->allocator() == nullptr ||
        moments.exp_avg.numel() == param.value->numel()) {
      continue;
    }
    assert(device == nullptr || device == param.value->allocator());
    device = param.value->allocator();
    missing.push_back(&moments);
    shapes.push_back(ArenaShape(*param.value));
  }
  if (missing.empty()) return;
  std::vector<Tensor> avg = ZerosInOneAllocation(device, shapes),
                      avg_sq = ZerosInOneAllocation(device, shapes);
  for (size_t i = 0; i < missing.size(); ++i) {
    missing[i]->exp_avg = std::move(avg[i]);
    missing[i]->exp_avg_sq = std::move(avg_sq[i]);
  }
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
