#include "training/expert_gradients.h"

#include <set>

#include "training/gradient_sync.h"

namespace glm {

ExpertSplit SplitRoutedExperts(const ModelParameters& params,
                               const std::vector<TrainableTensor>& trainable) {
  std::set<const Tensor*> experts;
  auto add = [&](const DecoderLayerParameters& layer) {
    if (!layer.is_moe) return;
    experts.insert(&layer.moe.experts_gate_up.value);
    experts.insert(&layer.moe.experts_down.value);
  };
  for (const DecoderLayerParameters& layer : params.layers) add(layer);
  for (const MtpParameters& mtp : params.mtp) add(mtp.layer);
  ExpertSplit split;
  for (const TrainableTensor& tensor : trainable) {
    (experts.count(tensor.value) > 0 ? split.experts : split.dense)
        .push_back(tensor);
  }
  return split;
}

absl::Status AllReduceExpertParallelGradients(Collectives& data_parallel,
                                              Collectives* expert_data,
                                              const ExpertSplit& split) {
  if (absl::Status status = AllReduceGradients(data_parallel, split.dense);
      !status.ok()) {
    return status;
  }
  if (expert_data == nullptr) return absl::OkStatus();
  return AllReduceGradients(*expert_data, split.experts);
}

}  // namespace glm
