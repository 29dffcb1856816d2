#include "training/overlapped_gradient_sum.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/tensor_arena.h"

namespace glm {
namespace {

// Buckets of `grads` from the last tensor down: each takes tensors until it
// holds bucket_elements or more.
std::vector<OverlappedGradientSum::Bucket> PlanBuckets(
    const std::vector<Tensor*>& grads, int64_t bucket_elements) {
  std::vector<OverlappedGradientSum::Bucket> buckets;
  size_t end = grads.size();
  while (end > 0) {
    size_t first = end;
    int64_t elements = 0;
    while (first > 0 && elements < bucket_elements) {
      elements += grads[--first]->numel();
    }
    buckets.push_back({first, end});
    end = first;
  }
  return buckets;
}

}  // namespace

absl::StatusOr<std::unique_ptr<OverlappedGradientSum>>
OverlappedGradientSum::Create(Collectives& group, std::vector<Tensor*> grads,
                              Allocator* device, int64_t bucket_elements) {
  if (bucket_elements <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient buckets need a positive size, not ", bucket_elements));
  }
  if (group.buffer_place() == BufferPlace::kDevice && device == nullptr) {
    return absl::InvalidArgumentError(
        "a group of device buffers cannot sum gradients in host memory");
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor* grad = grads[i];
    const Tensor* previous = i == 0 ? nullptr : grads[i - 1];
    if (grad->empty() || grad->arena() == nullptr ||
        grad->allocator() != device ||
        (previous != nullptr && (previous->arena() != grad->arena() ||
                                 previous->data() >= grad->data()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient ", i, " of ", grads.size(),
          " is not the next view of one arena where the others lie; "
          "overlapped sums need the model's gradient arena"));
    }
  }
  std::vector<Bucket> buckets = PlanBuckets(grads, bucket_elements);
  return std::unique_ptr<OverlappedGradientSum>(new OverlappedGradientSum(
      group, std::move(grads), device, std::move(buckets)));
}

OverlappedGradientSum::OverlappedGradientSum(Collectives& group,
                                             std::vector<Tensor*> grads,
                                             Allocator* device,
                                             std::vector<Bucket> buckets)
    : group_(group),
      grads_(std::move(grads)),
      device_(device),
      buckets_(std::move(buckets)),
      bucket_of_(grads_.size()),
      finished_(grads_.size(), false) {
  for (size_t i = 0; i < grads_.size(); ++i) index_of_[grads_[i]] = i;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    unfinished_.push_back(buckets_[b].end - buckets_[b].first);
    for (size_t i = buckets_[b].first; i < buckets_[b].end; ++i) {
      bucket_of_[i] = b;
    }
  }
  thread_ = std::thread([this] { Sum(); });
}

OverlappedGradientSum::~OverlappedGradientSum() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  thread_.join();
}

bool OverlappedGradientSum::Staged() const {
  return device_ != nullptr && group_.buffer_place() == BufferPlace::kHost;
}

void OverlappedGradientSum::Finished(const std::vector<Tensor*>& grads) {
  for (const Tensor* grad : grads) {
    auto it = index_of_.find(grad);
    if (it == index_of_.end() || finished_[it->second]) continue;
    finished_[it->second] = true;
    --unfinished_[bucket_of_[it->second]];
  }
  while (next_to_start_ < buckets_.size() && unfinished_[next_to_start_] == 0) {
    Start(next_to_start_++);
    ++started_during_backward_;
  }
}

void OverlappedGradientSum::Start(size_t bucket) {
  auto started = std::make_unique<Started>();
  started->bucket = bucket;
  const Bucket& b = buckets_[bucket];
  started->spans =
      SpansOf({grads_.begin() + b.first, grads_.begin() + b.end}).spans;
  if (device_ != nullptr && !Staged()) {
    // The group reads the device's memory from another stream once the
    // device has written it: the summing thread waits for this mark, so
    // this one goes on queuing the backward.
    started->written = device_->Mark();
  } else if (Staged()) {
    int64_t total = 0;
    for (const FloatSpan& span : started->spans) total += span.size;
    started->staged.resize(total);
    float* to = started->staged.data();
    for (const FloatSpan& span : started->spans) {
      device_->CopyToHost(to, span.data, span.size * sizeof(float));
      to += span.size;
    }
  }
  absl::MutexLock lock(&mutex_);
  queue_.push_back(started.get());
  in_flight_.push_back(std::move(started));
}

void OverlappedGradientSum::Sum() {
  while (true) {
    Started* started = nullptr;
    {
      absl::MutexLock lock(&mutex_);
      mutex_.Await(absl::Condition(
          +[](OverlappedGradientSum* self) {
            self->mutex_.AssertHeld();
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      // Stopping (the owner is gone: no Finish waits): what is queued is
      // not summed, as no peer may be left to sum it with.
      if (stopping_) return;
      started = queue_.front();
      queue_.pop_front();
      if (!error_.ok()) {
        ++summed_;  // skipped: a bucket before it failed
        continue;
      }
    }
    absl::Status status = SumBucket(*started);
    absl::MutexLock lock(&mutex_);
    if (!status.ok() && error_.ok()) error_ = std::move(status);
    ++summed_;
  }
}

absl::Status OverlappedGradientSum::SumBucket(Started& started) {
  if (started.written != nullptr) started.written->Wait();
  std::vector<FloatSpan> buffers = started.spans;
  if (Staged()) {
    buffers = {
        {started.staged.data(), static_cast<int64_t>(started.staged.size())}};
  }
  for (const FloatSpan& buffer : buffers) {
    if (absl::Status status =
            group_.AllReduce(buffer.data, buffer.size, ReduceOp::kSum);
        !status.ok()) {
      const Bucket& b = buckets_[started.bucket];
      return absl::Status(
          status.code(),
          absl::StrCat("gradient bucket ", started.bucket + 1, " of ",
                       buckets_.size(), " (tensors ", b.first, " to ",
                       b.end - 1, "): ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status OverlappedGradientSum::Finish() {
  while (next_to_start_ < buckets_.size()) Start(next_to_start_++);
  absl::Status status;
  std::vector<std::unique_ptr<Started>> done;
  {
    absl::MutexLock lock(&mutex_);
    mutex_.Await(absl::Condition(
        +[](OverlappedGradientSum* self) {
          self->mutex_.AssertHeld();
          return self->summed_ == self->in_flight_.size();
        },
        this));
    status = std::move(error_);
    error_ = absl::OkStatus();
    summed_ = 0;
    done.swap(in_flight_);
  }
  for (const std::unique_ptr<Started>& started : done) {
    if (!status.ok() || !Staged()) break;
    const float* from = started->staged.data();
    for (const FloatSpan& span : started->spans) {
      device_->CopyFromHost(span.data, from, span.size * sizeof(float));
      from += span.size;
    }
  }
  started_during_last_backward_ = started_during_backward_;
  started_during_backward_ = 0;
  next_to_start_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    unfinished_[b] = buckets_[b].end - buckets_[b].first;
  }
  finished_.assign(grads_.size(), false);
  return status;
}

}  // namespace glm
