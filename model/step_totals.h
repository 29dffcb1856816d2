// What the forwards of one optimizer step add up where the backend computes:
// the three loss sums and each MoE layer's expert loads, read to the host once
// when the step's micro batches are all queued. A read waits for the device;
// reading after every forward would keep the host from queueing the next
// micro batch while the device works on this one.
#ifndef GLM_MODEL_STEP_TOTALS_H_
#define GLM_MODEL_STEP_TOTALS_H_

#include <cstdint>
#include <vector>

#include "kernels/device_memory.h"
#include "kernels/tensor.h"
#include "model/loss_sums.h"

namespace glm {

class StepTotals {
 public:
  // Zero sums in `allocator`'s memory (null: host memory).
  explicit StepTotals(Allocator* allocator) : losses_(allocator) {}

  // Each forward's loss ops add here.
  LossSums& losses() { return losses_; }
  // Keeps a copy of one forward's expert offsets ([experts + 1], empty for a
  // dense layer) for decoder layer `layer` (main layers, then MTP layers).
  void KeepExpertOffsets(size_t layer, const IndexTensor& offsets) {
    if (offsets_.size() <= layer) offsets_.resize(layer + 1);
    offsets_[layer].push_back(offsets);
  }

  // Sets totals->lm_loss, mtp_loss and indexer_loss to the sums over the
  // step's forwards and totals->expert_load to each layer's tokens per expert
  // summed over them (empty for dense layers).
  template <typename Totals>
  void ReadInto(Totals* totals) const {
    losses_.ReadInto(totals);
    totals->expert_load.assign(offsets_.size(), {});
    for (size_t layer = 0; layer < offsets_.size(); ++layer) {
      for (const IndexTensor& kept : offsets_[layer]) {
        AddLoads(kept.HostValues(), &totals->expert_load[layer]);
      }
    }
  }

 private:
  static void AddLoads(const std::vector<int32_t>& offsets,
                       std::vector<int64_t>* load) {
    if (offsets.empty()) return;
    load->resize(offsets.size() - 1, 0);
    for (size_t e = 0; e + 1 < offsets.size(); ++e) {
      (*load)[e] += offsets[e + 1] - offsets[e];
    }
  }

  LossSums losses_;
  std::vector<std::vector<IndexTensor>> offsets_;
};

}  // namespace glm

#endif  // GLM_MODEL_STEP_TOTALS_H_
