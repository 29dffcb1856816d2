// A micro batch's forward and backward recorded once as backend work (a
// CUDA graph on a GPU) and replayed for every later micro batch of the same
// shape: a step of thousands of kernels goes to the device in a few launches
// instead of one host call each, so the device stops waiting for the host
// between kernels.
//
// A shape's first micro batch runs unrecorded: it grows the backend's scratch
// and allocates the step's expert loads, which a recording must not do. Its
// second is recorded, then replayed; so is every later one. A shape whose
// recording fails (an op that waits for the device, say) stays unrecorded,
// with one line on stderr saying why.
#ifndef GLM_TRAINING_RECORDED_MICRO_BATCHES_H_
#define GLM_TRAINING_RECORDED_MICRO_BATCHES_H_

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "model/glm_model.h"
#include "model/step_totals.h"

namespace glm {

class RecordedMicroBatches {
 public:
  // Records on `backend` (not owned); keeps the recordings of at most
  // `capacity` (>= 1) shapes, the most recent (each holds its activations'
  // device memory).
  explicit RecordedMicroBatches(Backend* backend, size_t capacity = 2)
      : backend_(backend), capacity_(capacity) {
    assert(capacity_ >= 1);
  }

  // The forward and backward of the batch `model` has loaded
  // (GlmModel::Load), adding to `step` (which must outlive the recordings:
  // they add to its memory).
  absl::Status Run(GlmModel& model, StepTotals* step);

  int64_t replays() const { return replays_; }

 private:
  struct Shape {
    int64_t runs = 0;
    bool failed = false;
    std::unique_ptr<RecordedWork> work;
  };
  // The entry of `shape`, made most recent; forgets the least recent shapes
  // beyond kRememberedShapes.
  Shape& Touch(const std::vector<int64_t>& shape);
  // Drops all but the `keep` most recent recordings.
  void KeepRecordings(size_t keep);

  Backend* backend_;
  size_t capacity_;
  int64_t replays_ = 0;
  // Most recent first.
  std::list<std::pair<std::vector<int64_t>, Shape>> shapes_;
};

}  // namespace glm

#endif  // GLM_TRAINING_RECORDED_MICRO_BATCHES_H_
