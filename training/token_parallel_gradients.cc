#include "training/token_parallel_gradients.h"

#include "parallel/tensor_parallel_shard.h"
#include "training/grad_clip.h"
#include "training/gradient_sync.h"

namespace glm {
namespace {

bool Split(const TokenParallel& parallel, const std::string& name) {
  return parallel.tp() > 1 && TensorParallelDim(name) >= 0;
}

}  // namespace

absl::Status SumTokenParallelGradients(
    const TokenParallel& parallel, Collectives* tensor, Collectives* context,
    const std::vector<TrainableTensor>& trainable) {
  if (parallel.cp() > 1) {
    if (absl::Status status = AllReduceGradients(*context, trainable);
        !status.ok()) {
      return status;
    }
  }
  if (parallel.tp() == 1) return absl::OkStatus();
  std::vector<TrainableTensor> whole;
  for (const TrainableTensor& param : trainable) {
    if (!Split(parallel, param.name)) whole.push_back(param);
  }
  return AllReduceGradients(*tensor, whole);
}

absl::StatusOr<double> TokenParallelGradSquaredSum(
    Backend& backend, TokenParallel& parallel,
    const std::vector<TrainableTensor>& trainable) {
  std::vector<TrainableTensor> whole, split;
  for (const TrainableTensor& param : trainable) {
    (Split(parallel, param.name) ? split : whole).push_back(param);
  }
  if (split.empty()) return GradSquaredSum(backend, whole);
  absl::StatusOr<double> parts = SumInRankOrder(*parallel.tensor_host_group(),
                                                GradSquaredSum(backend, split));
  if (!parts.ok()) return parts.status();
  return GradSquaredSum(backend, whole) + *parts;
}

absl::StatusOr<Tensor> GatherTensorParallel(TokenParallel& parallel,
                                            const std::string& name,
                                            const Tensor& part) {
  if (!Split(parallel, name)) return part;
  const int dim = TensorParallelDim(name), tp = parallel.tp();
  std::vector<float> gathered(part.numel() * tp);
  if (absl::Status status = parallel.tensor_host_group()->AllGather(
          part.data(), part.numel(), gathered.data());
      !status.ok()) {
    return status;
  }
  std::vector<int64_t> shape = part.shape();
  shape[dim] *= tp;
  return JoinTensorParallelParts(gathered.data(), shape, dim, tp);
}

Tensor TensorParallelPartOf(const TokenParallel& parallel,
                            const std::string& name, const Tensor& whole) {
  if (!Split(parallel, name)) return whole;
  return TensorParallelPart(whole, TensorParallelDim(name), parallel.tp(),
                            parallel.tp_rank());
}

}  // namespace glm
