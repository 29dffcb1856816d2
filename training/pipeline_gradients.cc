#include "training/pipeline_gradients.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

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

namespace {

// Sums one tensor's gradient over the pp ranks that read it: the lowest
// receives the others' in rank order, adds them, and sends the sum back.
// Ranks that do not read it take no part, so they need not hold it.
absl::Status SumOverReaders(Backend& backend, Collectives& pipeline,
                            const std::vector<int>& readers, Tensor& grad) {
  const int64_t count = grad.numel();
  const int first = readers.front();
  if (pipeline.rank() != first) {
    if (absl::Status sent = pipeline.Send(grad.data(), count, first);
        !sent.ok()) {
      return sent;
    }
    return pipeline.Recv(grad.data(), count, first);
  }
  Tensor other({count}, grad.on_host() ? nullptr : backend.allocator());
  const MatrixView sum{grad.data(), 1, count, count};
  for (size_t i = 1; i < readers.size(); ++i) {
    if (absl::Status status = pipeline.Recv(other.data(), count, readers[i]);
        !status.ok()) {
      return status;
    }
    backend.Axpy(1.f, ConstMatrixView(other.data(), 1, count, count), sum);
  }
  for (size_t i = 1; i < readers.size(); ++i) {
    if (absl::Status sent = pipeline.Send(grad.data(), count, readers[i]);
        !sent.ok()) {
      return sent;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SumSharedGradients(Backend& backend, Collectives& pipeline,
                                const PipelineTensors& tensors,
                                const std::vector<TrainableTensor>& trainable) {
  std::map<std::string, Tensor*> grads;
  for (const TrainableTensor& tensor : trainable) {
    grads[tensor.name] = tensor.grad;
  }
  for (const std::string& name : tensors.shared) {
    const std::vector<int>& readers = tensors.readers.at(name);
    if (std::find(readers.begin(), readers.end(), pipeline.rank()) ==
        readers.end()) {
      continue;
    }
    const auto grad = grads.find(name);
    if (grad == grads.end()) continue;  // not trained (LoRA trains adapters)
    if (absl::Status status =
            SumOverReaders(backend, pipeline, readers, *grad->second);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace glm
