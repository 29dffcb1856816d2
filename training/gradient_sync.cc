#include "training/gradient_sync.h"

#include <algorithm>
#include <cstring>

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
