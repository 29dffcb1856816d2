#include "training/gradient_sync.h"

#include <algorithm>

namespace glm {

absl::Status AllReduceGradients(Collectives& group,
                                const std::vector<TrainableTensor>& params) {
  int64_t total = 0;
  for (const TrainableTensor& p : params) total += p.grad->numel();
  std::vector<float> flat(total);
  int64_t offset = 0;
  for (const TrainableTensor& p : params) {
    std::copy_n(p.grad->data(), p.grad->numel(), flat.data() + offset);
    offset += p.grad->numel();
  }
  if (absl::Status status = group.AllReduce(flat.data(), total, ReduceOp::kSum);
      !status.ok()) {
    return status;
  }
  offset = 0;
  for (const TrainableTensor& p : params) {
    std::copy_n(flat.data() + offset, p.grad->numel(), p.grad->data());
    offset += p.grad->numel();
  }
  return absl::OkStatus();
}

}  // namespace glm
