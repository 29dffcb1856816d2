#include "training/adamw.h"

#include <cassert>
#include <utility>

#include "kernels/tensor_arena.h"

namespace glm {
namespace {

// Zero moments shaped like `values` into `moments`: views of one allocation
// per moment kind where the values live (kernels/tensor_arena.h).
void MakeZeroMoments(const std::vector<const Tensor*>& values,
                     const std::vector<AdamMoments*>& moments) {
  if (values.empty()) return;
  Allocator* allocator = values.front()->allocator();
  std::vector<std::vector<int64_t>> shapes;
  for (const Tensor* value : values) {
    assert(value->allocator() == allocator && "weights in one place");
    shapes.push_back(value->shape());
  }
  std::vector<Tensor> exp_avg = ZerosInOneAllocation(allocator, shapes);
  std::vector<Tensor> exp_avg_sq = ZerosInOneAllocation(allocator, shapes);
  for (size_t i = 0; i < values.size(); ++i) {
    moments[i]->exp_avg = std::move(exp_avg[i]);
    moments[i]->exp_avg_sq = std::move(exp_avg_sq[i]);
  }
}

}  // namespace

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
  const std::vector<AdamMoments*> moments = MomentsOf(params);
  std::vector<AdamWTensor> tensors;
  for (size_t i = 0; i < params.size(); ++i) {
    const TrainableTensor& param = params[i];
    assert(param.grad->numel() == param.value->numel());
    tensors.push_back({param.value->data(), param.grad->data(),
                       moments[i]->exp_avg.data(),
                       moments[i]->exp_avg_sq.data(), param.value->numel(),
                       TakesWeightDecay(*param.value)});
  }
  backend.AdamWStep(hyper, tensors);
}

std::vector<AdamMoments*> AdamW::MomentsOf(
    const std::vector<TrainableTensor>& params) {
  std::vector<AdamMoments*> moments, missing;
  std::vector<const Tensor*> missing_values;
  for (const TrainableTensor& param : params) {
    AdamMoments& m = moments_[param.name];
    if (m.exp_avg.numel() != param.value->numel()) {
      missing.push_back(&m);
      missing_values.push_back(param.value);
    }
    moments.push_back(&m);
  }
  MakeZeroMoments(missing_values, missing);
  return moments;
}

void AdamW::ReleaseMomentsExcept(const std::set<std::string>& kept) {
  for (auto it = moments_.begin(); it != moments_.end();) {
    it = kept.count(it->first) > 0 ? std::next(it) : moments_.erase(it);
  }
}

}  // namespace glm
