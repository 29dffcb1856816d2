// A process group seen from another buffer place: a rank whose buffers live
// on its device calls a Gloo group (host buffers) through it, and one whose
// buffers live in host memory calls an NCCL group (device buffers). Each call
// copies its inputs to the group's place through the device's allocator, runs
// the group's call, and copies its outputs back; where the places agree the
// calls go straight to the group. Ordering: the device's queued work finishes
// before a staged call reads it (Allocator::Wait, CopyToHost), and a call
// returns with its outputs where the caller reads them.
#ifndef GLM_PARALLEL_STAGED_COLLECTIVES_H_
#define GLM_PARALLEL_STAGED_COLLECTIVES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/collectives.h"
#include "kernels/device_memory.h"

namespace glm {

class StagedCollectives : public Collectives {
 public:
  // Calls `group` (not owned) with buffers in `place`; `device` (not owned;
  // null only where both places are the host's) is the allocator of the
  // device buffers on either side.
  StagedCollectives(Collectives& group, BufferPlace place, Allocator* device);

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  BufferPlace buffer_place() const override { return place_; }
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override;
  absl::Status AllReduceSum(int64_t* data, int64_t count) override;
  absl::Status Broadcast(float* data, int64_t count, int root) override;
  absl::Status AllGather(const float* in, int64_t count, float* out) override;
  absl::Status ReduceScatter(const float* in, int64_t count, float* out,
                             ReduceOp op) override;
  absl::Status AllToAllV(const float* in,
                         const std::vector<int64_t>& send_counts, float* out,
                         const std::vector<int64_t>& recv_counts) override;
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const float* data,
                                                         int64_t count,
                                                         int peer) override;
  absl::Status Recv(float* data, int64_t count, int peer) override;
  absl::Status Barrier() override { return group_.Barrier(); }

 private:
  // Whether a call goes straight to the group (the places agree); for device
  // buffers, once the device's queued work has finished.
  bool GoesDirect();

  Collectives& group_;
  const BufferPlace place_;
  Allocator* device_;
};

// A group as connected, and as host buffers and a device's buffers reach it:
// host buffers go to a host group directly, everything else through a
// StagedCollectives (which, for a device group, first waits for the device's
// queued work).
class GroupViews {
 public:
  GroupViews() = default;
  // `group` (not owned; null: no group, every view null) and `device` (not
  // owned; null: no device, the device view null).
  GroupViews(Collectives* group, Allocator* device);

  Collectives* connected() const { return connected_; }
  Collectives* host() const { return host_; }
  Collectives* device() const { return device_; }
  // The view for buffers on the device (or on the host).
  Collectives* For(bool on_device) const { return on_device ? device_ : host_; }

 private:
  Collectives* connected_ = nullptr;
  std::unique_ptr<StagedCollectives> host_staged_, device_staged_;
  Collectives* host_ = nullptr;
  Collectives* device_ = nullptr;
};

}  // namespace glm

#endif  // GLM_PARALLEL_STAGED_COLLECTIVES_H_
