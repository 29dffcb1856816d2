#include "parallel/staged_collectives.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace glm {
namespace {

// A buffer in the group's place standing in for one of the caller's in the
// other place.
class StagingBuffer {
 public:
  StagingBuffer(BufferPlace group_place, Allocator* device, size_t bytes)
      : group_place_(group_place), device_(device), bytes_(bytes) {
    if (group_place_ == BufferPlace::kHost) {
      // Gloo needs a real buffer even where a member exchanges nothing.
      host_.resize(std::max<size_t>(bytes_, 16));
    } else if (bytes_ > 0) {
      on_device_ = DeviceBuffer(device_, bytes_);
    }
  }

  void* data() {
    return group_place_ == BufferPlace::kHost ? static_cast<void*>(host_.data())
                                              : on_device_.data();
  }

  // The caller's bytes (none: null) into this buffer, complete when it
  // returns: a device buffer's allocation and copy, queued on the device's
  // stream, are done before the group's stream touches it.
  void From(const void* caller) {
    if (group_place_ == BufferPlace::kHost) {
      if (bytes_ > 0 && caller != nullptr) {
        device_->CopyToHost(host_.data(), caller, bytes_);
      }
      return;
    }
    if (bytes_ > 0 && caller != nullptr) {
      device_->CopyFromHost(on_device_.data(), caller, bytes_);
    }
    device_->Wait();
  }

  // This buffer's bytes into the caller's (a device's copy is ordered before
  // the ops the caller issues next).
  void To(void* caller) {
    if (bytes_ == 0) return;
    if (group_place_ == BufferPlace::kHost) {
      device_->CopyFromHost(caller, host_.data(), bytes_);
    } else {
      device_->CopyToHost(caller, on_device_.data(), bytes_);
    }
  }

 private:
  BufferPlace group_place_;
  Allocator* device_;
  size_t bytes_;
  std::vector<char> host_;
  DeviceBuffer on_device_;
};

// A staged send: its buffer lives until the send is done.
class StagedSend : public PendingSend {
 public:
  StagedSend(std::unique_ptr<PendingSend> send, StagingBuffer buffer)
      : buffer_(std::move(buffer)), send_(std::move(send)) {}
  absl::Status Wait() override { return send_->Wait(); }

 private:
  StagingBuffer buffer_;
  std::unique_ptr<PendingSend> send_;
};

template <typename T>
size_t Bytes(int64_t count) {
  return static_cast<size_t>(count) * sizeof(T);
}

int64_t Total(const std::vector<int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

// Runs `call` on a copy in `place` of the caller's `count` values at `data`
// (copied in when `read`), copied back when the call succeeds.
template <typename T, typename Call>
absl::Status InPlace(BufferPlace place, Allocator* device, T* data,
                     int64_t count, bool read, const Call& call) {
  StagingBuffer staged(place, device, Bytes<T>(count));
  staged.From(read ? data : nullptr);
  absl::Status status = call(static_cast<T*>(staged.data()));
  if (status.ok()) staged.To(data);
  return status;
}

// Runs `call` on copies in `place` of the caller's input (`in_count` values,
// copied in) and output (`out_count`, copied back when the call succeeds).
template <typename Call>
absl::Status InAndOut(BufferPlace place, Allocator* device, const float* in,
                      int64_t in_count, float* out, int64_t out_count,
                      const Call& call) {
  StagingBuffer staged_in(place, device, Bytes<float>(in_count));
  StagingBuffer staged_out(place, device, Bytes<float>(out_count));
  staged_out.From(nullptr);
  staged_in.From(in);
  absl::Status status = call(static_cast<const float*>(staged_in.data()),
                             static_cast<float*>(staged_out.data()));
  if (status.ok()) staged_out.To(out);
  return status;
}

}  // namespace

StagedCollectives::StagedCollectives(Collectives& group, BufferPlace place,
                                     Allocator* device)
    : group_(group), place_(place), device_(device) {}

bool StagedCollectives::GoesDirect() {
  if (place_ != group_.buffer_place()) return false;
  if (place_ == BufferPlace::kDevice) device_->Wait();
  return true;
}

absl::Status StagedCollectives::AllReduce(float* data, int64_t count,
                                          ReduceOp op) {
  if (GoesDirect()) return group_.AllReduce(data, count, op);
  return InPlace(
      group_.buffer_place(), device_, data, count, /*read=*/true,
      [&](float* staged) { return group_.AllReduce(staged, count, op); });
}

absl::Status StagedCollectives::AllReduceSum(int64_t* data, int64_t count) {
  if (GoesDirect()) return group_.AllReduceSum(data, count);
  return InPlace(
      group_.buffer_place(), device_, data, count, /*read=*/true,
      [&](int64_t* staged) { return group_.AllReduceSum(staged, count); });
}

absl::Status StagedCollectives::Broadcast(float* data, int64_t count,
                                          int root) {
  if (GoesDirect()) return group_.Broadcast(data, count, root);
  return InPlace(
      group_.buffer_place(), device_, data, count, /*read=*/true,
      [&](float* staged) { return group_.Broadcast(staged, count, root); });
}

absl::Status StagedCollectives::AllGather(const float* in, int64_t count,
                                          float* out) {
  if (GoesDirect()) return group_.AllGather(in, count, out);
  return InAndOut(group_.buffer_place(), device_, in, count, out,
                  count * size(), [&](const float* from, float* to) {
                    return group_.AllGather(from, count, to);
                  });
}

absl::Status StagedCollectives::ReduceScatter(const float* in, int64_t count,
                                              float* out, ReduceOp op) {
  if (GoesDirect()) return group_.ReduceScatter(in, count, out, op);
  return InAndOut(group_.buffer_place(), device_, in, count * size(), out,
                  count, [&](const float* from, float* to) {
                    return group_.ReduceScatter(from, count, to, op);
                  });
}

absl::Status StagedCollectives::AllToAllV(
    const float* in, const std::vector<int64_t>& send_counts, float* out,
    const std::vector<int64_t>& recv_counts) {
  if (GoesDirect()) return group_.AllToAllV(in, send_counts, out, recv_counts);
  return InAndOut(group_.buffer_place(), device_, in, Total(send_counts), out,
                  Total(recv_counts), [&](const float* from, float* to) {
                    return group_.AllToAllV(from, send_counts, to, recv_counts);
                  });
}

absl::StatusOr<std::unique_ptr<PendingSend>> StagedCollectives::StartSend(
    const float* data, int64_t count, int peer) {
  if (GoesDirect()) return group_.StartSend(data, count, peer);
  StagingBuffer staged(group_.buffer_place(), device_, Bytes<float>(count));
  staged.From(data);
  absl::StatusOr<std::unique_ptr<PendingSend>> send =
      group_.StartSend(static_cast<const float*>(staged.data()), count, peer);
  if (!send.ok()) return send.status();
  return std::unique_ptr<PendingSend>(
      new StagedSend(*std::move(send), std::move(staged)));
}

GroupViews::GroupViews(Collectives* group, Allocator* device)
    : connected_(group) {
  if (group == nullptr) return;
  host_ = group;
  if (group->buffer_place() != BufferPlace::kHost) {
    host_staged_ =
        std::make_unique<StagedCollectives>(*group, BufferPlace::kHost, device);
    host_ = host_staged_.get();
  }
  // Staged even where the group takes device buffers: the view orders the
  // device's queued work before the group reads it.
  if (device != nullptr) {
    device_staged_ = std::make_unique<StagedCollectives>(
        *group, BufferPlace::kDevice, device);
    device_ = device_staged_.get();
  }
}

absl::Status StagedCollectives::Recv(float* data, int64_t count, int peer) {
  if (GoesDirect()) return group_.Recv(data, count, peer);
  return InPlace(
      group_.buffer_place(), device_, data, count, /*read=*/false,
      [&](float* staged) { return group_.Recv(staged, count, peer); });
}

}  // namespace glm
