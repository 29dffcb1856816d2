#include "training/gradient_sync.h"

#include <algorithm>
#include <cstring>

#include "kernels/tensor_arena.h"

namespace glm {

Allocator* MemoryOf(const std::vector<Tensor*>& tensors) {
  for (const Tensor* t : tensors) {
    if (t->numel() > 0) return t->allocator();
  }
  return nullptr;
}

absl::Status AllReducePacked(Collectives& group,
                             const std::vector<Tensor*>& tensors) {
  if (tensors.empty()) return absl::OkStatus();
  Allocator* memory = MemoryOf(tensors);
  int64_t total = 0;
  for (const Tensor* tensor : tensors) total += tensor->numel();
  Tensor flat({total}, memory);
  float* next = flat.data();
  for (const Tensor* tensor : tensors) {
    CopyFloats(memory, next, tensor->data(), tensor->numel());
    next += tensor->numel();
  }
  if (absl::Status status = group.AllReduce(flat.data(), total, ReduceOp::kSum);
      !status.ok()) {
    return status;
  }
  const float* from = flat.data();
  for (Tensor* tensor : tensors) {
    CopyFloats(memory, tensor->data(), from, tensor->numel());
    from += tensor->numel();
  }
  return absl::OkStatus();
}

absl::Status AllReduceWhereTheyLie(Collectives& group,
                                   const std::vector<Tensor*>& tensors) {
  const TensorSpans spans = SpansOf(tensors);
  // Tensors in an arena (a model's): one call per run of them, on the arena
  // itself.
  for (const FloatSpan& span : spans.spans) {
    if (absl::Status status =
            group.AllReduce(span.data, span.size, ReduceOp::kSum);
        !status.ok()) {
      return status;
    }
  }
  // Tensors of an allocation each (LoRA adapters) lie scattered: they travel
  // packed, one call for all of them rather than one per tensor.
  return AllReducePacked(group, spans.owning);
}

absl::Status AllReduceGradients(Collectives& group,
                                const std::vector<TrainableTensor>& params) {
  std::vector<Tensor*> grads;
  for (const TrainableTensor& p : params) grads.push_back(p.grad);
  return AllReduceWhereTheyLie(group, grads);
}

absl::StatusOr<double> SumInRankOrder(Collectives& group, double value) {
  static_assert(sizeof(double) == 2 * sizeof(float));
  float packed[2];
  std::memcpy(packed, &value, sizeof(value));
  std::vector<float> gathered(2 * group.size());
  if (absl::Status status = group.AllGather(packed, 2, gathered.data());
      !status.ok()) {
    return status;
  }
  double total = 0;
  for (int rank = 0; rank < group.size(); ++rank) {
    double part;
    std::memcpy(&part, &gathered[2 * rank], sizeof(part));
    total += part;
  }
  return total;
}

}  // namespace glm
