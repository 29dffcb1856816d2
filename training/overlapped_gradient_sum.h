// Megatron's --overlap-grad-reduce for data parallelism: a step's gradients
// are summed over the data-parallel group in buckets, each started as soon
// as the step's last backward has finished its tensors
// (GlmModel::set_gradients_finished), on a thread of its own, so that the
// sums of the last layers travel while the backward computes the first ones.
//
// A bucket is a run of consecutive tensors of about `bucket_elements`
// elements (a larger tensor is a bucket alone), counted from the last
// tensor, which the backward finishes first. Every rank plans the same
// buckets and starts them in the order its backward finishes them, the same
// on every rank, as the group's calls must match. Each bucket is summed as
// AllReduceGradients sums its tensors (where they lie, one call per run of
// them); with two ranks the sums are those of one call over all of them bit
// for bit.
//
// Where the gradients lie decides how a bucket travels:
// - host memory (a CPU rank) and a host group (Gloo): summed where they lie;
// - a device and a device group (NCCL): summed where they lie once the
//   device has run the ops that wrote them (the summing thread waits for an
//   Allocator::Mark taken when the bucket starts; the caller's thread goes
//   on queuing the backward);
// - a device and a host group (Gloo, as when two workers share a GPU): each
//   bucket is copied to host memory when it starts, summed there, and copied
//   back in Finish.
#ifndef GLM_TRAINING_OVERLAPPED_GRADIENT_SUM_H_
#define GLM_TRAINING_OVERLAPPED_GRADIENT_SUM_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collectives/collectives.h"
#include "kernels/device_memory.h"
#include "kernels/tensor.h"

namespace glm {

// Megatron's default bucket: 40M elements.
inline constexpr int64_t kDefaultGradientBucketElements = 40'000'000;

class OverlappedGradientSum {
 public:
  // `grads`: every gradient the step sums, in the order they lie in their
  // arena (views of it; InvalidArgument naming the first that is not).
  // `device`: their allocator (null: host memory). `group` (not owned) is the
  // data-parallel group as connected; a device group needs `device`.
  static absl::StatusOr<std::unique_ptr<OverlappedGradientSum>> Create(
      Collectives& group, std::vector<Tensor*> grads, Allocator* device,
      int64_t bucket_elements = kDefaultGradientBucketElements);
  ~OverlappedGradientSum();
  OverlappedGradientSum(const OverlappedGradientSum&) = delete;
  OverlappedGradientSum& operator=(const OverlappedGradientSum&) = delete;

  // The backward finished `grads` (those not summed here are ignored):
  // starts, in plan order, the buckets finished with all before them.
  void Finished(const std::vector<Tensor*>& grads);
  // Starts the buckets not yet started (in plan order), waits until every
  // bucket is summed and back where its gradients lie, and makes ready for
  // the next step. The first error, naming its bucket; the buckets after it
  // are not summed.
  absl::Status Finish();

  // The buckets, each as its tensors' indices in `grads` [first, end), in
  // the order they are planned (the last tensors first).
  struct Bucket {
    size_t first = 0;
    size_t end = 0;
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Of the last finished step's buckets, those the backward started (the
  // others started in Finish).
  size_t started_during_last_backward() const {
    return started_during_last_backward_;
  }

 private:
  // A started bucket: the buffers the group sums (spans of the gradients,
  // or host copies of them in `staged`).
  struct Started {
    size_t bucket = 0;
    std::vector<FloatSpan> spans;
    std::vector<float> staged;
    // For a device group: where the device's queue stood when the bucket
    // started (the thread sums once the device has passed it).
    std::unique_ptr<DeviceMark> written;
  };

  OverlappedGradientSum(Collectives& group, std::vector<Tensor*> grads,
                        Allocator* device, std::vector<Bucket> buckets);
  void Start(size_t bucket);
  // The thread: sums each started bucket in turn.
  void Sum();
  absl::Status SumBucket(Started& started);
  bool Staged() const;

  Collectives& group_;
  const std::vector<Tensor*> grads_;
  Allocator* const device_;
  const std::vector<Bucket> buckets_;
  // Per bucket, its tensors the backward has not finished yet; buckets
  // start in plan order, each once it and those before it are finished.
  std::vector<size_t> unfinished_;
  size_t next_to_start_ = 0;
  size_t started_during_backward_ = 0, started_during_last_backward_ = 0;
  absl::flat_hash_map<const Tensor*, size_t> index_of_;  // in grads_
  std::vector<size_t> bucket_of_;                        // per tensor of grads_
  std::vector<bool> finished_;  // per tensor of grads_, this step

  absl::Mutex mutex_;
  std::deque<Started*> queue_ ABSL_GUARDED_BY(mutex_);
  // This step's, in order.
  std::vector<std::unique_ptr<Started>> in_flight_ ABSL_GUARDED_BY(mutex_);
  size_t summed_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace glm

#endif  // GLM_TRAINING_OVERLAPPED_GRADIENT_SUM_H_
