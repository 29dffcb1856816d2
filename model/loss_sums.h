// A forward's losses where the backend's loss ops add them (a device's memory
// on a device backend): read back together once the whole forward is queued,
// instead of the host waiting for the device after every op that makes one.
#ifndef GLM_MODEL_LOSS_SUMS_H_
#define GLM_MODEL_LOSS_SUMS_H_

#include "kernels/device_memory.h"
#include "kernels/tensor.h"

namespace glm {

class LossSums {
 public:
  enum Slot { kLm, kMtp, kIndexer, kSlots };

  // Zeroed sums in `allocator`'s memory (null: host memory).
  explicit LossSums(Allocator* allocator) : sums_(kSlots, 0.0, allocator) {}

  double* at(Slot slot) { return sums_.data() + slot; }
  void SetZero() { sums_.SetZero(); }

  // Copies the sums to the host (waiting for the ops that add to them) into
  // losses->lm_loss, mtp_loss and indexer_loss (ForwardResult, StageLosses).
  template <typename Losses>
  void ReadInto(Losses* losses) const {
    TensorStorage<double> host(kSlots, 0.0, nullptr);
    host.CopyFrom(sums_);
    losses->lm_loss = host.data()[kLm];
    losses->mtp_loss = host.data()[kMtp];
    losses->indexer_loss = host.data()[kIndexer];
  }

 private:
  TensorStorage<double> sums_;
};

}  // namespace glm

#endif  // GLM_MODEL_LOSS_SUMS_H_
