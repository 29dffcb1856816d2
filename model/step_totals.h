// What the forwards of one optimizer step add up where the backend computes:
// the three loss sums and each MoE layer's expert loads, read to the host once
// when the step's micro batches are all queued. A read waits for the device;
// reading after every forward would keep the host from queueing the next
// micro batch while the device works on this one.
#ifndef GLM_MODEL_STEP_TOTALS_H_
#define GLM_MODEL_STEP_TOTALS_H_

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/device_memory.h"
#include "kernels/tensor.h"
#include "model/loss_sums.h"

namespace glm {

class StepTotals {
 public:
  // Zero sums in `allocator`'s memory (null: host memory).
  explicit StepTotals(Allocator* allocator)
      : allocator_(allocator), losses_(allocator) {}

  // Each forward's loss ops add here.
  LossSums& losses() { return losses_; }
  // Adds one forward's tokens per expert of decoder layer `layer` (main
  // layers, then MTP layers) from its expert offsets ([experts + 1]; empty
  // for a dense layer), where the backend computes. A layer's first call
  // allocates its loads: a recorded forward (Backend::Record) must follow
  // an unrecorded one that made them.
  void AddExpertLoads(Backend& backend, size_t layer,
                      const IndexTensor& offsets) {
    if (offsets.numel() == 0) return;
    if (loads_.size() <= layer) loads_.resize(layer + 1);
    IndexTensor& loads = loads_[layer];
    if (loads.empty())
      loads = IndexTensor({offsets.numel() - 1}, 0, allocator_);
    backend.AddExpertLoads(offsets.data(), loads.numel(), loads.data());
  }
  // Zeroes the sums and loads for another step, where they are: work
  // recorded over them adds to the same memory every step.
  void Reset() {
    losses_.SetZero();
    for (IndexTensor& loads : loads_) loads.SetZero();
  }

  // Sets totals->lm_loss, mtp_loss and indexer_loss to the sums over the
  // step's forwards and totals->expert_load to each layer's tokens per expert
  // summed over them (empty for dense layers).
  template <typename Totals>
  void ReadInto(Totals* totals) const {
    losses_.ReadInto(totals);
    totals->expert_load.assign(loads_.size(), {});
    for (size_t layer = 0; layer < loads_.size(); ++layer) {
      if (loads_[layer].empty()) continue;
      const std::vector<int32_t> loads = loads_[layer].HostValues();
      totals->expert_load[layer].assign(loads.begin(), loads.end());
    }
  }

 private:
  Allocator* allocator_;
  LossSums losses_;
  std::vector<IndexTensor> loads_;  // per layer; empty for dense layers
};

}  // namespace glm

#endif  // GLM_MODEL_STEP_TOTALS_H_
