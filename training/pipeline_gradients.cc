#include "training/pipeline_gradients.h"

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

}  // namespace glm
