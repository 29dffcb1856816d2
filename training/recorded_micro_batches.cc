#include "training/recorded_micro_batches.h"

#include <cstdio>
#include <utility>

#include "absl/status/statusor.h"

namespace glm {
namespace {

// Shapes remembered, most without a recording (packed SFT batches rarely
// repeat theirs): enough to see a repeat within a few steps.
constexpr size_t kRememberedShapes = 64;

}  // namespace

RecordedMicroBatches::Shape& RecordedMicroBatches::Touch(
    const std::vector<int64_t>& shape) {
  auto it = shapes_.begin();
  while (it != shapes_.end() && it->first != shape) ++it;
  if (it == shapes_.end()) {
    shapes_.emplace_front(shape, Shape());
  } else {
    shapes_.splice(shapes_.begin(), shapes_, it);
  }
  while (shapes_.size() > kRememberedShapes) shapes_.pop_back();
  return shapes_.front().second;
}

void RecordedMicroBatches::KeepRecordings(size_t keep) {
  size_t kept = 0;
  for (auto& [key, entry] : shapes_) {
    if (entry.work != nullptr && ++kept > keep) entry.work.reset();
  }
}

absl::Status RecordedMicroBatches::Run(GlmModel& model, StepTotals* step) {
  Shape& shape = Touch(model.loaded_shape());
  if (shape.work == nullptr && (shape.runs++ == 0 || shape.failed)) {
    return model.TrainLoaded(step);
  }
  if (shape.work == nullptr) {
    // Room first: a recording's memory is held while it exists.
    KeepRecordings(capacity_ - 1);
    absl::StatusOr<std::unique_ptr<RecordedWork>> recorded =
        backend_->Record([&model, step] { return model.TrainLoaded(step); });
    if (!recorded.ok() || *recorded == nullptr) {
      shape.failed = true;
      if (!recorded.ok()) {
        std::fprintf(stderr,
                     "micro batches of %lld tokens run unrecorded: %s\n",
                     static_cast<long long>(model.loaded_shape()[0]),
                     recorded.status().ToString().c_str());
      }
      return model.TrainLoaded(step);
    }
    shape.work = *std::move(recorded);
  }
  shape.work->Replay();
  ++replays_;
  return absl::OkStatus();
}

}  // namespace glm
