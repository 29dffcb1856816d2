// A test group that stands in for a group of either buffer place: it checks
// that every buffer it is handed lives where its place says (in `device`, a
// separate host allocator standing in for a device's memory, or outside it;
// null: no device, every buffer the host's),
// then forwards the call to a host group (Gloo), which any host pointer
// serves. With kDevice it plays NCCL on the CPU, queued exchanges included.
#ifndef GLM_PARALLEL_PLACE_CHECKING_GROUP_H_
#define GLM_PARALLEL_PLACE_CHECKING_GROUP_H_

#include <memory>
#include <utility>
#include <vector>

#include "collectives/collectives.h"
#include "gtest/gtest.h"
#include "kernels/device_memory.h"

namespace glm {

class PlaceCheckingGroup : public Collectives {
 public:
  PlaceCheckingGroup(std::unique_ptr<Collectives> inner, BufferPlace place,
                     const Allocator* device)
      : inner_(std::move(inner)), place_(place), device_(device) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  BufferPlace buffer_place() const override { return place_; }
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    Check(data);
    return inner_->AllReduce(data, count, op);
  }
  absl::Status AllReduceSum(int64_t* data, int64_t count) override {
    Check(data);
    return inner_->AllReduceSum(data, count);
  }
  absl::Status Broadcast(float* data, int64_t count, int root) override {
    Check(data);
    return inner_->Broadcast(data, count, root);
  }
  absl::Status AllGather(const float* in, int64_t count, float* out) override {
    Check(in);
    Check(out);
    return inner_->AllGather(in, count, out);
  }
  absl::Status ReduceScatter(const float* in, int64_t count, float* out,
                             ReduceOp op) override {
    Check(in);
    Check(out);
    return inner_->ReduceScatter(in, count, out, op);
  }
  absl::Status AllToAllV(const float* in,
                         const std::vector<int64_t>& send_counts, float* out,
                         const std::vector<int64_t>& recv_counts) override {
    Check(in);
    Check(out);
    return inner_->AllToAllV(in, send_counts, out, recv_counts);
  }
  // With kDevice it queues exchanges as NCCL does; the stand-in device has
  // done its work as issued, so the exchange runs at once (and `queue`, null
  // for a stand-in, is not read).
  bool queues_on_device() const override {
    return place_ == BufferPlace::kDevice;
  }
  absl::Status QueueAllToAllV(const float* in,
                              const std::vector<int64_t>& send_counts,
                              float* out,
                              const std::vector<int64_t>& recv_counts,
                              void* queue) override {
    if (!queues_on_device()) {
      return Collectives::QueueAllToAllV(in, send_counts, out, recv_counts,
                                         queue);
    }
    ++queued_;
    return AllToAllV(in, send_counts, out, recv_counts);
  }
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const float* data,
                                                         int64_t count,
                                                         int peer) override {
    Check(data);
    return inner_->StartSend(data, count, peer);
  }
  absl::Status Recv(float* data, int64_t count, int peer) override {
    Check(data);
    return inner_->Recv(data, count, peer);
  }
  absl::Status Barrier() override { return inner_->Barrier(); }

  int checked() const { return checked_; }
  // Exchanges queued on the (stand-in) device.
  int queued() const { return queued_; }

 private:
  void Check(const void* buffer) {
    const bool on_device = device_ != nullptr && device_->Holds(buffer);
    EXPECT_EQ(on_device, place_ == BufferPlace::kDevice);
    ++checked_;
  }

  std::unique_ptr<Collectives> inner_;
  BufferPlace place_;
  const Allocator* device_;
  int checked_ = 0;
  int queued_ = 0;
};

}  // namespace glm

#endif  // GLM_PARALLEL_PLACE_CHECKING_GROUP_H_
