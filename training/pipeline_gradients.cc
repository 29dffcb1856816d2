#include "training/pipeline_gradients.h"

#include <cstring>

#include "training/grad_clip.h"
#include "training/gradient_sync.h"

namespace glm {

std::vector<TrainableTensor> SelectTrainable(
    const std::vector<TrainableTensor>& trainable,
    const std::set<std::string>& names) {
  std::vector<TrainableTensor> selected;
  for (const TrainableTensor& tensor : trainable) {
    if (names.count(tensor.name) > 0) selected.push_back(tensor);
  }
  return selected;
}

absl::Status SumSharedGradients(Collectives& pipeline,
                                const PipelineTensors& tensors,
                                const std::vector<TrainableTensor>& trainable) {
  const std::vector<TrainableTensor> shared = SelectTrainable(
      trainable,
      std::set<std::string>(tensors.shared.begin(), tensors.shared.end()));
  if (shared.empty()) return absl::OkStatus();
  return AllReduceGradients(pipeline, shared);
}

absl::StatusOr<double> PipelineGradSquaredSum(
    Collectives& pipeline, const PipelineTensors& tensors,
    const std::vector<TrainableTensor>& trainable) {
  // The ranks' parts travel as the bytes of a double (two floats' worth,
  // gathered, never added as floats) and are added in rank order: every
  // rank gets the same sum, as precise as one process's. A float sum would
  // move the clipping scale by about 1e-7, enough to flip a top-k or routing
  // choice a few steps later.
  const double mine = GradSquaredSum(SelectTrainable(trainable, tensors.owned));
  static_assert(sizeof(double) == 2 * sizeof(float));
  float packed[2];
  std::memcpy(packed, &mine, sizeof(mine));
  std::vector<float> gathered(2 * pipeline.size());
  if (absl::Status status = pipeline.AllGather(packed, 2, gathered.data());
      !status.ok()) {
    return status;
  }
  double total = 0;
  for (int rank = 0; rank < pipeline.size(); ++rank) {
    double part;
    std::memcpy(&part, &gathered[2 * rank], sizeof(part));
    total += part;
  }
  return total;
}

}  // namespace glm
